"""The notebooks in a real browser: JupyterLab driven by headless Chromium through Playwright.

A widget that works when poked from Python can still show up in the page as "Error displaying
widget" or an empty box (a missing front-end extension, a comm that never connects). These tests
start JupyterLab from this environment on a copy of notebooks/, run every cell from the Lab UI
and look at what a learner would see.

Chromium is Debian's (`apt-get install chromium`); Playwright never downloads a browser here.
Screenshots go to test-artifacts/browser/ (git-ignored).  Run only these tests with
`make test PYTEST_ARGS="-m browser"`.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

sync_api = pytest.importorskip(
    "playwright.sync_api",
    reason="playwright (python) is not installed: pip install -e '.[test]'",
)

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="Debian's chromium is not installed (apt-get install chromium); "
        "Playwright's own browser download is never used",
    ),
]

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
ARTIFACTS = REPO / "test-artifacts" / "browser"
EXPLORER_NOTEBOOK = "03_grouped_l2_ordering.ipynb"
START_NOTEBOOK = "00_start_here.ipynb"

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Time limits (page states in ms, as Playwright takes them).  Cells run kernels in Triton's
# interpreter on a small CPU machine that may run other notebooks at the same time (pytest -n 2):
# generous, several times what a passing run takes on 2 busy cores.
SERVER_START_S = 60
LAB_LOAD_MS = 60_000
RUN_ALL_MS = 180_000
WIDGETS_MS = 60_000
WIDGET_UPDATE_MS = 60_000

# Lab settings for a clean, deterministic page: no news/update pop-ups (and no network), a kernel
# that starts without asking, every cell kept in the DOM (no windowing), no autosave.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "windowingMode": "none",
        "autoStartDefaultKernel": True,
    },
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

# Helpers installed in every page; they read the notebook through `window.jupyterapp`
# (exposed by --LabApp.expose_app_in_browser) and the DOM.
PAGE_HELPERS = r"""
window.__gemmPanel = (path) => {
  const app = window.jupyterapp;
  if (!app || !app.shell) return null;
  for (const w of app.shell.widgets('main')) {
    if (w.context && w.context.path === path && w.content && w.sessionContext) return w;
  }
  return null;
};
window.__gemmState = (path) => {
  const panel = window.__gemmPanel(path);
  if (!panel) return {found: false};
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const code = panel.content.widgets.filter(c => c.model.type === 'code');
  const toRun = code.filter(c => c.model.sharedModel.getSource().trim() !== '');
  const errors = [];
  const views = [];  // the output node of every widget-view output
  let domErrors = 0;
  code.forEach((c, i) => {
    const outputs = c.outputArea.model.toJSON();
    outputs.forEach((out, j) => {
      if (out.output_type === 'error') {
        errors.push(`code cell ${i}: ${out.ename}: ${out.evalue}`);
      } else if (out.output_type === 'stream' && out.name === 'stderr'
                 && /Traceback|Error:/.test([].concat(out.text).join(''))) {
        errors.push(`code cell ${i} stderr: ${[].concat(out.text).join('').slice(-400)}`);
      }
      if (out.data && out.data['WIDGET_MIME']) {
        const child = c.outputArea.widgets[j];
        views.push(child ? child.node.querySelector('.jp-OutputArea-output') : null);
      }
    });
    // JupyterLab shows a traceback as a stderr output; the rest have "error" in their MIME type.
    domErrors += [...c.node.querySelectorAll('.jp-OutputArea-output')].filter(o => {
      const mime = o.getAttribute('data-mime-type') || '';
      return mime.includes('error')
        || (mime === 'application/vnd.jupyter.stderr' && o.innerText.includes('Traceback'));
    }).length;
  });
  const shown = views.filter(v => v !== null);
  const text = panel.content.node.innerText;
  return {
    found: true,
    kernel: kernel ? kernel.status : 'none',
    connected: !!kernel && kernel.connectionStatus === 'connected',
    codeCells: toRun.length,
    executed: toRun.filter(c => c.model.executionCount !== null).length,
    pending: code.filter(c => {
      const prompt = c.node.querySelector('.jp-InputPrompt');
      return prompt && prompt.textContent.includes('*');
    }).length,
    errors,
    domErrors,
    widgetOutputs: views.length,
    widgetViews: shown.length,
    widgetViewsRendered: shown.filter(v => v.querySelector('.jupyter-widgets')).length,
    loadingWidgets: (text.match(/Loading widget\.\.\./g) || []).length,
    // ipywidgets 8 draws a broken-page icon for a view it cannot build; older ones wrote text.
    widgetErrors: (text.match(/Error displaying widget[^\n]*/g) || []).concat(
      [...panel.content.node.querySelectorAll('.jupyter-widgets-error-widget')].map(
        e => `widget error view: ${e.innerText.trim()}`)),
  };
};
""".replace("WIDGET_MIME", WIDGET_MIME)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LabServer:
    """A JupyterLab process on a private copy of the notebooks, with its own port and token."""

    def __init__(self, base: Path):
        self.root = base / "root"
        config = base / "config"
        shutil.copytree(
            NOTEBOOKS,
            self.root / "notebooks",
            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"),
        )
        # Markdown cells show committed pictures as ../images/...
        if (REPO / "images").is_dir():
            shutil.copytree(REPO / "images", self.root / "images")
        settings = config / "lab-settings"
        for name, values in LAB_SETTINGS.items():
            (settings / name).parent.mkdir(parents=True, exist_ok=True)
            (settings / name).write_text(json.dumps(values))
        self.port = _free_port()
        self.token = secrets.token_hex(24)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = base / "jupyterlab.log"
        env = dict(os.environ)
        # Keep the user's Jupyter/IPython configuration (and kernelspecs) out of the test.
        for var, sub in [
            ("JUPYTER_CONFIG_DIR", "jupyter-config"),
            ("JUPYTER_DATA_DIR", "jupyter-data"),
            ("JUPYTER_RUNTIME_DIR", "jupyter-runtime"),
            ("IPYTHONDIR", "ipython"),
        ]:
            env[var] = str(config / sub)
        command = [
            sys.executable, "-m", "jupyter", "lab",
            "--no-browser",
            "--allow-root",  # CI containers run as root; harmless otherwise
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            "--ServerApp.terminals_enabled=False",
            f"--LabApp.user_settings_dir={settings}",
            f"--LabApp.workspaces_dir={config / 'workspaces'}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        self._log = open(self.log_path, "wb")
        # Its own session and no stdin: a Ctrl-C meant for pytest must not reach the server's
        # "Shut down this Jupyter server (y/[n])?" prompt; stop() ends it either way.
        self.process = subprocess.Popen(
            command, cwd=self.root, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(
            self.url + path, method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def wait_ready(self) -> None:
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"JupyterLab exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                self.api("/api/status")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                # Not listening yet: wait for the process to move on rather than spin.
                try:
                    self.process.wait(timeout=0.25)
                except subprocess.TimeoutExpired:
                    pass
        raise TimeoutError(
            f"JupyterLab did not answer on {self.url}/api/status within {SERVER_START_S}s:\n"
            f"{self.log_tail()}"
        )

    def shutdown_kernels(self) -> None:
        for session in self.api("/api/sessions"):
            self.api(f"/api/sessions/{session['id']}", method="DELETE")

    def log_tail(self, lines: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Shut the kernels down, then the server (SIGTERM, SIGKILL if it hangs)."""
        try:
            if self.process.poll() is None:
                try:
                    self.shutdown_kernels()
                except OSError:
                    pass  # the server's own SIGTERM handling shuts kernels down too
                self.process.terminate()
                try:
                    self.process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=10)
        finally:
            try:  # anything the server left in its process group (kernels have their own)
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._log.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    for attempt in range(3):
        server = LabServer(tmp_path_factory.mktemp("jupyterlab"))
        try:
            server.wait_ready()
            break
        except RuntimeError:
            server.stop()
            # Another process took the free port between our probe and the server's bind.
            if "already in use" not in server.log_path.read_text(errors="replace") or attempt == 2:
                raise
        except BaseException:
            server.stop()
            raise
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory):
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 1000},
        )
        context.add_init_script(PAGE_HELPERS)
        try:
            yield context
        finally:
            context.close()


class NotebookPage:
    """One notebook open in JupyterLab, with what went wrong on the page collected for messages."""

    def __init__(self, lab: LabServer, context, name: str):
        self.lab = lab
        self.name = name
        self.path = f"notebooks/{name}"
        self.page = context.new_page()
        self.page_errors: list[str] = []
        self.console_errors: list[str] = []
        self.page.on("pageerror", lambda error: self.page_errors.append(str(error)))
        self.page.on(
            "console",
            lambda message: message.type == "error" and self.console_errors.append(message.text),
        )
        self.page.goto(f"{lab.url}/lab/tree/{self.path}?token={lab.token}")

    def state(self) -> dict:
        return self.page.evaluate("path => window.__gemmState(path)", self.path)

    def wait_for(self, condition_js: str, timeout_ms: int, what: str) -> dict:
        """Wait until `condition_js` (a JS expression over `s`, the notebook state) holds."""
        try:
            self.page.wait_for_function(
                f"path => {{ const s = window.__gemmState(path); return ({condition_js}) ? s : null; }}",
                arg=self.path,
                timeout=timeout_ms,
                polling=250,
            )
        except sync_api.TimeoutError:
            pytest.fail(
                f"{self.name}: timed out after {timeout_ms / 1000:.0f}s waiting for {what}.\n"
                f"notebook state: {self.state()}\npage errors: {self.page_errors}\n"
                f"console errors: {self.console_errors[-10:]}\n"
                f"server log:\n{self.lab.log_tail()}"
            )
        return self.state()

    def run_all(self) -> dict:
        """Run every cell with the Lab command and wait until the kernel has finished them."""
        self.wait_for(
            "s.found && s.connected && s.kernel === 'idle'", LAB_LOAD_MS,
            "the notebook and an idle, connected kernel",
        )
        self.page.evaluate(
            """path => {
              const panel = window.__gemmPanel(path);
              window.jupyterapp.shell.activateById(panel.id);
              window.jupyterapp.commands.execute('notebook:run-all-cells');
            }""",
            self.path,
        )
        # Done when every non-empty code cell has an execution count (or a cell failed, which
        # stops the queue) and nothing is left running.
        state = self.wait_for(
            "s.kernel === 'idle' && s.pending === 0 "
            "&& (s.executed === s.codeCells || s.errors.length > 0)",
            RUN_ALL_MS,
            "all cells to run",
        )
        assert not state["errors"] and state["domErrors"] == 0, (
            f"{self.name}: error outputs after Run All: {state['errors']} "
            f"({state['domErrors']} error output areas in the page)"
        )
        return state

    def wait_widgets_rendered(self) -> dict:
        state = self.wait_for(
            "(s.widgetViews === s.widgetOutputs && s.widgetViewsRendered === s.widgetViews "
            "&& s.loadingWidgets === 0) || s.widgetErrors.length > 0",
            WIDGETS_MS,
            "every widget view to render",
        )
        assert not state["widgetErrors"], (
            f"{self.name}: {state['widgetErrors']}\nconsole errors: {self.console_errors[-10:]}"
        )
        assert state["loadingWidgets"] == 0
        return state

    def screenshot(self, label: str, target=None) -> None:
        """Save test-artifacts/browser/<notebook>-<label>.png of the page or of one locator."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (target or self.page).screenshot(path=ARTIFACTS / f"{Path(self.name).stem}-{label}.png")

    def close(self) -> None:
        self.page.close()
        self.lab.shutdown_kernels()


@contextmanager
def open_notebook(lab, context, name):
    if not (NOTEBOOKS / name).exists():
        pytest.fail(f"notebooks/{name} is missing")
    for stale in ARTIFACTS.glob(f"{Path(name).stem}-*.png"):
        stale.unlink()  # screenshots of an earlier run would mislead
    notebook = NotebookPage(lab, context, name)
    try:
        yield notebook
    except BaseException:
        notebook.screenshot("failure")
        raise
    finally:
        notebook.close()


def _picture_fingerprint(image) -> tuple[str, str]:
    """The <img> src and a hash of the pixels it shows (a new blob URL alone proves nothing)."""
    src, data_url = image.evaluate(
        """async img => {
          await img.decode();
          const canvas = document.createElement('canvas');
          canvas.width = img.naturalWidth;
          canvas.height = img.naturalHeight;
          canvas.getContext('2d').drawImage(img, 0, 0);
          return [img.src, canvas.toDataURL()];
        }"""
    )
    return src, hashlib.sha256(data_url.encode()).hexdigest()


def test_schedule_explorer_renders_and_reacts(lab, browser_context):
    with open_notebook(lab, browser_context, EXPLORER_NOTEBOOK) as notebook:
        notebook.run_all()
        state = notebook.wait_widgets_rendered()
        assert state["widgetViews"] > 0, "the schedule explorer shows no widget"

        # The schedule explorer (gemm_kernels.widgets): a widget output with a GROUP_SIZE_M
        # slider and a picture (an Image widget) with the counters (an HTML widget) beside it.
        page = notebook.page
        group_slider = page.locator(".widget-slider", has_text="GROUP_SIZE_M")
        explorer = (
            page.locator(".jp-OutputArea-output", has=page.locator("img.widget-image"))
            .filter(has=group_slider)
            .first
        )
        explorer.scroll_into_view_if_needed()
        picture = explorer.locator("img.widget-image").first
        counters = explorer.locator("img.widget-image ~ .widget-html .widget-html-content").first
        notebook.screenshot("page")
        notebook.screenshot("explorer-before", explorer)

        src_before, pixels_before = _picture_fingerprint(picture)
        counters_before = counters.inner_text()

        handle = explorer.locator(".widget-slider", has_text="GROUP_SIZE_M").locator(".noUi-handle").first
        value = int(float(handle.get_attribute("aria-valuenow")))
        at_max = value >= int(float(handle.get_attribute("aria-valuemax")))
        handle.focus()
        handle.press("ArrowLeft" if at_max else "ArrowRight")
        try:
            page.wait_for_function(
                "([img, html, src, text]) => img.src !== src && html.innerText !== text",
                arg=[picture.element_handle(), counters.element_handle(), src_before, counters_before],
                timeout=WIDGET_UPDATE_MS,
                polling=250,
            )
        except sync_api.TimeoutError:
            pytest.fail(
                f"moving GROUP_SIZE_M off {value} did not change both the picture and the counters "
                f"within {WIDGET_UPDATE_MS / 1000:.0f}s (slider now at {handle.get_attribute('aria-valuenow')}; "
                f"picture src changed: {picture.get_attribute('src') != src_before}; "
                f"counters changed: {counters.inner_text() != counters_before}).\n"
                f"notebook state: {notebook.state()}\nconsole errors: {notebook.console_errors[-10:]}"
            )
        src_after, pixels_after = _picture_fingerprint(picture)
        counters_after = counters.inner_text()
        notebook.screenshot("explorer-after", explorer)

        assert int(float(handle.get_attribute("aria-valuenow"))) != value, "the slider did not move"
        assert src_after != src_before
        assert pixels_after != pixels_before, "the picture's src changed but not its pixels"
        assert counters_after != counters_before
        # Moving a slider must not break anything either.
        state = notebook.state()
        assert not state["errors"] and state["domErrors"] == 0, state["errors"]
        assert not notebook.page_errors, notebook.page_errors


def test_start_here_runs_clean(lab, browser_context):
    with open_notebook(lab, browser_context, START_NOTEBOOK) as notebook:
        notebook.run_all()
        notebook.wait_widgets_rendered()
        notebook.screenshot("page")
        assert not notebook.page_errors, notebook.page_errors


# A learner's first kernel with no mask at all, and the exercise check that runs it: the check's
# checked run stops it before it touches memory, and the kernel process must survive to run more.
FAILING_EXERCISE_CELLS = [
    "import gemm_kernels as gk\n\nimport torch\nimport triton\nimport triton.language as tl\n\n"
    "from gemm_kernels.lab.exercises.start_here import check_axpy",
    "@triton.jit\ndef axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):\n"
    "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    tl.store(out_ptr + offsets, alpha * tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))\n\n\n"
    "def axpy(alpha, x, y):\n    out = torch.empty_like(x)\n"
    "    axpy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, alpha, x.numel(), BLOCK=1024)\n    return out",
    "check_axpy(axpy)",
    "print('the kernel is alive:', 6 * 7)",
]


def test_a_failing_exercise_is_explained_and_the_kernel_stays_alive(lab, browser_context):
    import nbformat

    name = "90_failing_exercise.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in FAILING_EXERCISE_CELLS])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nbformat.write(nb, lab.root / "notebooks" / name)
    notebook = NotebookPage(lab, browser_context, name)
    try:
        state = notebook.run_all()  # no error output anywhere: the check returns feedback, it does not raise
        assert state["connected"] and state["kernel"] == "idle", state
        page = notebook.page
        feedback = page.locator(".jp-OutputArea-output", has_text="left its tensor").first
        feedback.scroll_into_view_if_needed()
        text = feedback.inner_text()
        assert "axpy_kernel: load through x_ptr" in text and "active lanes" in text, text
        picture = feedback.locator("img").first
        assert picture.evaluate("img => img.complete && img.naturalWidth > 0"), "the picture of the bad lanes"
        alive = page.locator(".jp-OutputArea-output", has_text="the kernel is alive: 42")
        assert alive.count() == 1, "the cell after the failing check did not run"
        notebook.screenshot("failing-exercise", feedback)
        assert not notebook.page_errors, notebook.page_errors
    except BaseException:
        notebook.screenshot("failure")
        raise
    finally:
        notebook.close()
