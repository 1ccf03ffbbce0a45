"""The book's Sphinx extension: glossary links, and a record of how each notebook executed.

* :class:`GlossaryLinks` links the first use of every glossary term on a page (prose, or inline
  code such as ```offs```) to its entry, as a ``:term:`` reference, so that Sphinx resolves it and
  ``-n -W`` fails on one that does not resolve.  Titles, links, code cells and their outputs, and
  the page header are left alone.
* After the build, ``book-info.json`` in the output says, per notebook, whether it executed, how
  long it took and whether the result came from the cache.
"""

from __future__ import annotations

import json
import platform

from .glossary import TERMS

try:  # the [book] extra; this module imports without it (the package imports everything in its tests)
    from docutils import nodes
    from sphinx import addnodes
    from sphinx.transforms import SphinxTransform
except ImportError:  # pragma: no cover - exercised where the [book] extra is missing
    nodes = None

#: pages whose words are not linked to the glossary
SKIP_DOCS = {"glossary"}
#: classes of the containers the book adds to a page (its header): never linked
SKIP_CLASSES = {"gk-nav", "gk-launch"}


def find_terms(text: str, wanted: dict) -> list:
    """[(start, end, term)] of the first match of each term in ``wanted`` (name -> Term) in ``text``,
    left to right, never overlapping; at one position the longest match wins.  Found terms are
    removed from ``wanted``."""
    found, pos = [], 0
    while wanted:
        best = None
        for term in list(wanted.values()):
            if term.regex is None:
                continue
            m = term.regex.search(text, pos)
            if m and (best is None or m.start() < best[0] or (m.start() == best[0] and m.end() > best[1])):
                best = (m.start(), m.end(), term)
        if best is None:
            break
        found.append(best)
        del wanted[best[2].name]
        pos = best[1]
    return found


if nodes is not None:
    _SKIP_NODES = (nodes.title, nodes.subtitle, nodes.reference, addnodes.pending_xref, nodes.FixedTextElement,
                   nodes.raw, nodes.image, nodes.term, nodes.rubric, nodes.comment, nodes.target,
                   nodes.system_message, nodes.substitution_definition, nodes.caption, addnodes.toctree,
                   addnodes.download_reference)

    def _skipped(node) -> bool:
        parent = node.parent
        while parent is not None:
            if isinstance(parent, _SKIP_NODES):
                return True
            if parent.get("nb_element") if isinstance(parent, nodes.Element) else False:
                return True  # a code cell, its outputs
            if isinstance(parent, nodes.Element) and SKIP_CLASSES & set(parent.get("classes", ())):
                return True
            parent = parent.parent
        return False

    def _xref(term, docname: str, child) -> addnodes.pending_xref:
        ref = addnodes.pending_xref("", refdomain="std", reftype="term", reftarget=term.name, refexplicit=True,
                                    refwarn=True, refdoc=docname)
        ref += child
        return ref

    class GlossaryLinks(SphinxTransform):
        """Link the first use of each glossary term on a page to the glossary."""

        default_priority = 900

        def apply(self, **kwargs) -> None:
            docname = self.env.docname
            if docname in SKIP_DOCS:
                return
            wanted = {t.name: t for t in TERMS}
            by_code = {code: t for t in TERMS for code in t.code}
            for text in list(self.document.findall(nodes.Text)):
                if not wanted:
                    return
                parent = text.parent
                if isinstance(parent, nodes.literal):
                    term = by_code.get(parent.astext())
                    if term is not None and term.name in wanted and not _skipped(parent):
                        holder = parent.parent
                        index = holder.index(parent)
                        holder.remove(parent)
                        holder.insert(index, _xref(term, docname, parent))
                        del wanted[term.name]
                    continue
                if parent is None or _skipped(text):
                    continue
                source = str(text)
                matches = find_terms(source, wanted)
                if not matches:
                    continue
                pieces, pos = [], 0
                for start, end, term in matches:
                    if start > pos:
                        pieces.append(nodes.Text(source[pos:start]))
                    pieces.append(_xref(term, docname, nodes.inline(source[start:end], source[start:end],
                                                                    classes=["gk-term"])))
                    pos = end
                if pos < len(source):
                    pieces.append(nodes.Text(source[pos:]))
                parent.replace(text, pieces)

    def _write_info(app, exception) -> None:
        """book-info.json: how each notebook executed, and with what."""
        if exception is not None or app.builder.format != "html":
            return
        from myst_nb.sphinx_ import NbMetadataCollector

        import numpy
        import torch
        import triton

        notebooks = {}
        for docname in sorted(app.env.found_docs):
            data = NbMetadataCollector.get_exec_data(app.env, docname) if docname.startswith("notebooks/") else None
            if data:
                notebooks[docname] = {key: data.get(key) for key in ("succeeded", "runtime", "method", "error")}
        info = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
                "numpy": numpy.__version__, "mode": "Triton interpreter (CPU)", "notebooks": notebooks}
        (app.outdir / "book-info.json").write_text(json.dumps(info, indent=1) + "\n")


def setup(app):
    if nodes is None:
        raise ImportError("gemm_kernels.book.sphinxext needs Sphinx: pip install -e '.[book]'")
    app.add_transform(GlossaryLinks)
    app.connect("build-finished", _write_info)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
