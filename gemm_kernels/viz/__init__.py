"""Pictures: pure drawing functions (``drawings``), the ipywidgets explorers built on them
(``widgets``) and the committed images' generator (``images``)."""
