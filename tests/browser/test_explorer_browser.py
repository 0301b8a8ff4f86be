"""Chapter 2's block-table explorer and chapter 6's replay in a real browser: JupyterLab driven by headless Chromium.

``tests/test_explorer.py`` clicks the widget's Python side. Only a browser proves the other half:
that ipywidgets' JupyterLab extension draws the explorer, and that a mouse click travels to the
kernel and comes back as a new block grid. So this test starts JupyterLab on a free localhost
port, opens a fresh copy of chapter 2 in Debian's ``chromium`` (driven by Playwright; Playwright's
own browser download does not work here), runs the cells up to the explorer, clicks its buttons
and compares the DOM (the renderer's ``data-*`` attributes and the counters) with the state model
after the same clicks in this process. Screenshots go to pytest's tmp dir, and to
``$PAGEDKV_SCREENSHOTS`` when it is set.

A passing run must mean the front end works, so the second test blocks the widget extension's
JavaScript and asserts that the same flow fails. Run both with ``make test-browser``; the main
``pytest tests`` run leaves this directory out (``--ignore=tests/browser``) because it needs
Chromium and Playwright, which that target installs.

Manual check of the other ways a front end goes missing: ``PAGEDKV_BROWSER_SABOTAGE=disable-extension``
runs ``jupyter labextension disable @jupyter-widgets/jupyterlab-manager`` in the test's private
Jupyter config, and ``PAGEDKV_BROWSER_SABOTAGE=break-js`` serves the extension's entry point as
a script that throws. With either, ``test_explorer_in_jupyterlab`` must fail.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat
import pytest
from playwright.sync_api import BrowserContext, Locator, Page, Route, sync_playwright
from playwright.sync_api import Error as PlaywrightError

if TYPE_CHECKING:   # imported when needed: pagedkv_edu brings torch, which loads while JupyterLab starts
    from pagedkv_edu.viz.explorer import BlockExplorer

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "02_block_pool_and_tables.ipynb"
JUPYTER = Path(sys.executable).with_name("jupyter")   # the venv running pytest serves the notebook
CHROMIUM = Path(os.environ.get("PAGEDKV_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
WIDGET_EXTENSION = "@jupyter-widgets/jupyterlab-manager"
WIDGET_JS = f"**/lab/extensions/{WIDGET_EXTENSION}/**"
SABOTAGE = os.environ.get("PAGEDKV_BROWSER_SABOTAGE", "")

# Every wait is bounded, with room over what the 2-core machine took while other jobs loaded it
# (load average 7): Lab started in ~20 s, the notebook page in ~15-25 s, its cells in ~12 s,
# a click round trip in under 0.5 s.
LAB_START_S = 90
PAGE_S = 90
RUN_S = 120
WIDGET_S = 10        # from "the explorer cell has finished" to "its widget view is drawn"
CLICK_S = 30
STEP_S = 10         # one UI step of starting the run (focus, menu, menu item)

PROMPT_RAN = re.compile(r"\[\d+\]:?")   # a code cell's prompt once it has run
SVG = "{http://www.w3.org/2000/svg}"


class WidgetMissing(AssertionError):
    """The explorer cell ran, but no live widget view appeared: the front end is missing or broken."""


# --- the JupyterLab server -----------------------------------------------------------------
@dataclass
class Lab:
    url: str
    workdir: Path   # the server's root dir: test notebooks are written here


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lab_env(root: Path) -> dict[str, str]:
    """Private config, data, runtime, settings and workspace dirs: nothing of the user's leaks in."""
    dirs = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data", "JUPYTER_RUNTIME_DIR": "runtime",
            "JUPYTERLAB_SETTINGS_DIR": "settings", "JUPYTERLAB_WORKSPACES_DIR": "workspaces", "IPYTHONDIR": "ipython"}
    env = dict(os.environ)
    for var, name in dirs.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        env[var] = str(root / name)
    # No news toast over the widget in the screenshots and no request to the internet; every
    # cell in the DOM (JupyterLab 4 otherwise renders only the cells in view, lazily).
    settings = {("apputils-extension", "notification"): {"fetchNews": "false", "checkForUpdates": False},
                ("notebook-extension", "tracker"): {"windowingMode": "none"}}
    for (extension, plugin), values in settings.items():
        path = root / "settings" / "@jupyterlab" / extension / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    return env


def _wait_for_lab(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + LAB_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"jupyter lab did not answer on {url} within {LAB_START_S} s:\n{log.read_text()[-3000:]}")


def _stop_lab(proc: subprocess.Popen[bytes], runtime_dir: Path) -> None:
    """SIGTERM lets the server shut its kernels down; then kill the group and any kernel left over.

    Kernels run in sessions of their own (jupyter_client starts them with ``start_new_session``),
    so killing the server's process group does not reach them; they are found by the connection
    file path in their command line, which lies in this test's private runtime dir.
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    marker = str(runtime_dir).encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker in cmdline.read_bytes():
                os.kill(int(cmdline.parent.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not JUPYTER.exists():
        pytest.fail(f"{JUPYTER} not found: run the tests with the project's venv (make test-browser)")
    root = tmp_path_factory.mktemp("lab")
    workdir = root / "notebooks"
    workdir.mkdir()
    env = _lab_env(root)
    if SABOTAGE == "disable-extension":
        subprocess.run([str(JUPYTER), "labextension", "disable", "--level=user", WIDGET_EXTENSION],
                       env=env, check=True, timeout=60, capture_output=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = root / "lab.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(JUPYTER), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--IdentityProvider.token=",
             "--ServerApp.password=", "--allow-root", f"--ServerApp.root_dir={workdir}"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        importlib.import_module("pagedkv_edu.viz.explorer")   # torch's import overlaps the server's start
        _wait_for_lab(url, proc, log)
        yield Lab(url, workdir)
    finally:
        _stop_lab(proc, Path(env["JUPYTER_RUNTIME_DIR"]))


def explorer_cell_index(nb: nbformat.NotebookNode) -> int:
    found = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "BlockExplorer(" in c.source]
    assert len(found) == 1, f"expected one cell that builds a BlockExplorer in {NOTEBOOK.name}, found {len(found)}"
    return found[0]


def notebook_copy(lab: Lab, name: str) -> str:
    """Chapter 2 up to its explorer cell, without outputs or saved widget state.

    Clearing the outputs matters: the committed notebook carries the explorer's saved widget
    state and a static SVG, which a browser could show without a kernel. The later cells
    (the chapter's simulation) do not touch the widget, so they are left out to save time.
    """
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells = nb.cells[: explorer_cell_index(nb) + 1]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, lab.workdir / name)
    return name


def mirror_explorer() -> BlockExplorer:
    """The explorer cell executed in this process: the model the browser must agree with."""
    from pagedkv_edu.exercises.my_engine import load_parts

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # The cell reads the chapter's report card; the lab's copy runs where no my_engine/ exists,
    # so its kernel builds the shipped parts, and so does this one (an empty directory).
    with tempfile.TemporaryDirectory() as empty:
        namespace: dict[str, Any] = {"parts": load_parts(Path(empty) / "my_engine", quiet=True)}
    exec(nb.cells[explorer_cell_index(nb)].source, namespace)   # the project's own notebook cell
    return namespace["explorer"]


# --- the browser ----------------------------------------------------------------------------
class Shots:
    """Numbered screenshots in pytest's tmp dir, copied to ``$PAGEDKV_SCREENSHOTS`` when set."""

    def __init__(self, directory: Path, prefix: str) -> None:
        self.directory, self.prefix, self.count = directory, prefix, 0
        directory.mkdir(parents=True, exist_ok=True)

    def take(self, target: Page | Locator, what: str) -> Path:
        self.count += 1
        path = self.directory / f"{self.prefix}-{self.count:02d}-{what.replace(' ', '_').replace('×', 'x')}.png"
        target.screenshot(path=path)
        if os.environ.get("PAGEDKV_SCREENSHOTS"):
            dest = Path(os.environ["PAGEDKV_SCREENSHOTS"])
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, dest / path.name)
        return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    """One Chromium with a fresh profile for the module: the second test reuses its HTTP cache."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: `apt-get install -y chromium` (make test-browser does it as root)")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            tmp_path_factory.mktemp("chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1600, "height": 1000})
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def shots(request: pytest.FixtureRequest, tmp_path: Path) -> Shots:
    return Shots(tmp_path / "screenshots", request.node.name.removeprefix("test_"))


@pytest.fixture
def page(browser: BrowserContext, shots: Shots) -> Iterator[Page]:
    """A new tab; its last picture is taken at teardown, so a failing run leaves one too."""
    page = browser.new_page()
    page.set_default_timeout(CLICK_S * 1000)
    if SABOTAGE == "break-js":
        page.route(WIDGET_JS, lambda route: route.fulfill(
            status=200, content_type="application/javascript",
            body="throw new Error('widget front end broken on purpose');")
            if "remoteEntry" in route.request.url else route.continue_())
    try:
        yield page
    finally:
        try:
            shots.take(page, "page")
        finally:
            page.close()


def notebook_panel(page: Page) -> Locator:
    """The notebook on show (hidden tabs stay in the DOM)."""
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")


def open_and_run(page: Page, lab: Lab, name: str) -> None:
    """Open the notebook, wait for an idle kernel, then Run > Run All Cells, as a reader would.

    A workspace of its own per notebook, so JupyterLab does not reopen another test's tabs.
    """
    page.goto(f"{lab.url}/lab/workspaces/{Path(name).stem}/tree/{name}", timeout=PAGE_S * 1000)
    panel = notebook_panel(page)
    panel.locator(".jp-CodeCell").first.wait_for(timeout=PAGE_S * 1000)
    panel.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=PAGE_S * 1000)
    _run_all_cells(page, panel)
    # Done when every code cell is in the DOM, none is queued or running ([*]) and the first one
    # has run; after an error JupyterLab clears the queue, so this also ends a failed run.
    code_cells = sum(c.cell_type == "code" for c in nbformat.read(lab.workdir / name, as_version=4).cells)
    prompts: list[str] = []
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        prompts = [p.strip() for p in panel.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()]
        if len(prompts) == code_cells and PROMPT_RAN.fullmatch(prompts[0]) and not any("*" in p for p in prompts):
            break
        time.sleep(0.5)
    else:
        raise TimeoutError(f"the notebook did not finish within {RUN_S} s; prompts: {prompts}")
    if not all(PROMPT_RAN.fullmatch(p) for p in prompts):
        errors = panel.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
        raise AssertionError(f"not every cell ran: prompts {prompts}\n" + "\n".join(e[-1500:] for e in errors))


def _run_all_cells(page: Page, panel: Locator, attempts: int = 3) -> None:
    """Run > Run All Cells, until a cell starts.

    Right after the page loads, the notebook may not be the shell's current widget yet (the menu
    item is then disabled or a no-op), or a transient popup may take the click; so focus a cell,
    use the menu, and try again after Escape if no cell starts.
    """
    prompts = panel.locator(".jp-CodeCell .jp-InputPrompt")
    problem = "no cell started"
    for attempt in range(attempts):
        if attempt:
            print(f"Run All Cells, attempt {attempt + 1}: the last one failed with: {problem}")
            page.keyboard.press("Escape")
            time.sleep(1)
        try:
            prompts.first.click(timeout=STEP_S * 1000)   # focus: the menu acts on the current notebook
            page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text="Run").first.click(timeout=STEP_S * 1000)
            item = page.locator("li.lm-Menu-item[data-command='runmenu:run-all']")
            item.wait_for(timeout=STEP_S * 1000)
            if "lm-mod-disabled" in (item.get_attribute("class") or ""):
                problem = "Run All Cells was disabled"
                continue
            item.click(timeout=STEP_S * 1000)
        except PlaywrightError as exc:
            problem = str(exc).splitlines()[0]
            continue
        deadline = time.monotonic() + STEP_S
        while time.monotonic() < deadline:
            if any(p.strip() not in ("", "[ ]:") for p in prompts.all_inner_texts()):
                return
            time.sleep(0.3)
        problem = "no cell started"
    raise TimeoutError(f"Run All Cells failed {attempts} times; the last time: {problem}")


def find_explorer(page: Page, timeout_s: float = WIDGET_S) -> Locator:
    """The live explorer view in the last cell's output; :class:`WidgetMissing` if it does not come.

    The output itself must exist first (the kernel side worked). Without the widget front end
    JupyterLab falls back to the bundle's static ``image/svg+xml``, which has no buttons, so
    the test asks for the widget's DOM: its buttons and the inline SVG of its HTML child.
    """
    output = notebook_panel(page).locator(".jp-CodeCell").last.locator(".jp-OutputArea-output")
    output.first.wait_for(state="attached", timeout=WIDGET_S * 1000)
    view = output.locator(".widget-vbox").filter(has=page.locator("button.jupyter-button"))
    try:
        view.first.locator("svg.pagedkv-blocks").wait_for(state="visible", timeout=timeout_s * 1000)
    except PlaywrightError as exc:
        shown = output.evaluate_all("els => els.map(e => e.getAttribute('data-mime-type') || e.className)")
        raise WidgetMissing(f"no live explorer widget within {timeout_s} s; the output shows {shown}") from exc
    return view.first


# --- reading the state back -----------------------------------------------------------------
# Blocks as (id, state, owners, fill, refs), tables as (request, block ids), and the counters.
DOM_STATE_JS = """view => {
    const svg = view.querySelector('svg.pagedkv-blocks');
    const label = [...view.children].find(c => c.classList.contains('widget-label'));
    return {
        counters: label ? label.textContent.trim() : null,
        header: svg.querySelector('text.counters').textContent,
        blocks: [...svg.querySelectorAll('g.block')].map(g => [Number(g.dataset.block), g.dataset.state,
                 g.dataset.owner, Number(g.dataset.fill), Number(g.dataset.refs)]),
        tables: [...svg.querySelectorAll('g.table')].map(g => [g.dataset.request, g.dataset.blocks]),
    };
}"""


def dom_state(view: Locator) -> dict[str, Any]:
    return view.evaluate(DOM_STATE_JS)


def model_state(explorer: BlockExplorer) -> dict[str, Any]:
    """What ``DOM_STATE_JS`` must read, taken from the renderer's own output for the model's state."""
    from pagedkv_edu.viz.render import render_svg
    svg = ET.fromstring(render_svg(explorer.state.snapshot()))
    groups = list(svg.iter(f"{SVG}g"))
    header = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "counters"]
    return {
        "counters": explorer.counters.value,
        "header": header[0],
        "blocks": [[int(g.get("data-block")), g.get("data-state"), g.get("data-owner"), int(g.get("data-fill")),
                    int(g.get("data-refs"))] for g in groups if g.get("class") == "block"],
        "tables": [[g.get("data-request"), g.get("data-blocks")] for g in groups if g.get("class") == "table"],
    }


def wait_for_state(view: Locator, want: dict[str, Any], timeout_s: float = CLICK_S) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        got = dom_state(view)
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def drive_explorer(page: Page, shots: Shots) -> list[tuple[str, float]]:
    """The whole positive check: find the widget, click each button, compare the DOM each time.

    Returns each click's round-trip time. Raises :class:`WidgetMissing` if there is no widget,
    and AssertionError if the DOM does not follow the clicks.
    """
    model = mirror_explorer()
    view = find_explorer(page)
    view.scroll_into_view_if_needed()
    got = wait_for_state(view, model_state(model))
    assert got == model_state(model), "the explorer the notebook drew is not the state its cell built"
    shots.take(view, "after the notebook")
    timings = []
    for label, model_button in (("add request", model.add_button), ("decode step", model.step_button),
                                ("step ×N", model.step_n_button), ("finish", model.finish_button)):
        before = got
        model_button.click()
        want = model_state(model)
        assert want != before, f"clicking {label!r} should change the model's picture"
        started = time.monotonic()
        view.get_by_role("button", name=label, exact=True).click()
        got = wait_for_state(view, want)
        timings.append((label, time.monotonic() - started))
        shots.take(view, f"after {label}")
        assert got == want, f"after clicking {label!r} the browser shows\n{got}\nbut the model says\n{want}"
        _assert_click_meaning(label, before, got)
    return timings


def _assert_click_meaning(label: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    """What each click means, read off the DOM alone (the model check above says how much)."""
    free = {b[0] for b in after["blocks"] if b[1] == "free"}
    was_free = {b[0] for b in before["blocks"] if b[1] == "free"}
    requests_before = [t[0] for t in before["tables"]]
    requests_after = [t[0] for t in after["tables"]]
    if label == "add request":
        assert len(requests_after) == len(requests_before) + 1 and free < was_free
    elif label in ("decode step", "step ×N"):
        assert requests_after == requests_before and free <= was_free and after["header"] != before["header"]
    elif label == "finish":
        gone = set(requests_before) - set(requests_after)
        assert len(gone) == 1 and free > was_free
        returned = {int(b) for t in before["tables"] if t[0] in gone for b in t[1].split()}
        assert returned <= free, f"finished request's blocks {sorted(returned)} are not all free: {sorted(free)}"


# --- the tests ------------------------------------------------------------------------------
def test_explorer_in_jupyterlab(lab: Lab, page: Page, shots: Shots) -> None:
    """Run chapter 2 in JupyterLab and click through the explorer; the DOM follows every click."""
    name = notebook_copy(lab, "ch2_live.ipynb")
    open_and_run(page, lab, name)
    timings = drive_explorer(page, shots)
    print("click round trips:", ", ".join(f"{label} {seconds:.1f} s" for label, seconds in timings))


def test_fails_without_widget_frontend(lab: Lab, page: Page, shots: Shots) -> None:
    """Block the ipywidgets extension's JavaScript: the same check must fail, not pass on the static SVG."""
    blocked: list[str] = []

    def abort(route: Route) -> None:
        blocked.append(route.request.url)
        route.abort()

    page.route(WIDGET_JS, abort)
    name = notebook_copy(lab, "ch2_no_widgets.ipynb")
    open_and_run(page, lab, name)
    with pytest.raises(WidgetMissing, match="no live explorer widget"):
        drive_explorer(page, shots)
    assert blocked, f"no request for {WIDGET_JS} was made, so nothing was blocked"
    # The cell did run: its output is the static fallback picture.
    output = notebook_panel(page).locator(".jp-CodeCell").last.locator(".jp-OutputArea-output")
    assert output.locator("img, svg").count() > 0, "the explorer cell should show the static SVG fallback"


# --- the replay widget (chapters 6 and 8) --------------------------------------------------------
# A run of the tiny random model under memory pressure, recorded and replayed: small enough to run in
# seconds, with admissions, preemptions and a drain to step through.
REPLAY_SOURCE = """from pagedkv_edu.engine import LLMEngine, SamplingParams
from pagedkv_edu.viz.trace import EngineTrace
from pagedkv_edu.model.loading import load_model
from pagedkv_edu.viz.replay_widget import ReplayWidget

tiny = load_model("tiny-random")
trace = EngineTrace()
engine = LLMEngine(tiny.model, tiny.tokenizer, kv_budget_tokens=64, block_size=4, max_seq_len=64,
                   watermark=0.0, trace=trace)
prompts = [[100 + (7 * i + j) % 900 for j in range(5 + 3 * i)] for i in range(6)]
engine.generate(prompts, SamplingParams(max_tokens=8, ignore_eos=True), use_tqdm=False)
replay = ReplayWidget(trace, interval_ms=400)
replay"""

REPLAY_JS = """view => {
    const svg = view.querySelector('svg.pagedkv-replay');
    if (!svg) return null;
    return {step: svg.dataset.step, refs: svg.querySelector('g.grid').dataset.refs,
            running: svg.querySelector('g.queue[data-queue="running"]').dataset.ids};
}"""


def replay_notebook(lab: Lab, name: str) -> str:
    """A two-cell notebook: setup, then the recorded run and its replay widget."""
    chapter = nbformat.read(NOTEBOOK, as_version=4)
    nb = nbformat.v4.new_notebook(metadata={k: v for k, v in chapter.metadata.items() if k != "widgets"})
    nb.cells = [nbformat.v4.new_code_cell("import pagedkv_edu\npagedkv_edu.setup(seed=0);"),
                nbformat.v4.new_code_cell(REPLAY_SOURCE)]
    nbformat.write(nb, lab.workdir / name)
    return name


def mirror_replay() -> Any:
    """The replay cell executed in this process: the frames the browser must show."""
    namespace: dict[str, Any] = {}
    exec(REPLAY_SOURCE, namespace)
    return namespace["replay"]


def replay_model_state(replay: Any, index: int) -> dict[str, str]:
    """What ``REPLAY_JS`` must read at frame ``index``, from the renderer's own output."""
    from pagedkv_edu.viz.replay import frame_svg
    svg = ET.fromstring(frame_svg(replay.state.trace, index, replay.state.selected))
    groups = list(svg.iter(f"{SVG}g"))
    grid = next(g for g in groups if g.get("class") == "grid")
    running = next(g for g in groups if g.get("class") == "queue" and g.get("data-queue") == "running")
    return {"step": str(index), "refs": grid.get("data-refs"), "running": running.get("data-ids")}


def find_replay(page: Page, timeout_s: float = WIDGET_S) -> Locator:
    output = notebook_panel(page).locator(".jp-CodeCell").last.locator(".jp-OutputArea-output")
    output.first.wait_for(state="attached", timeout=WIDGET_S * 1000)
    view = output.locator(".widget-vbox").filter(has=page.locator("svg.pagedkv-replay"))
    try:
        view.first.locator("svg.pagedkv-replay").wait_for(state="visible", timeout=timeout_s * 1000)
    except PlaywrightError as exc:
        raise WidgetMissing(f"no live replay widget within {timeout_s} s") from exc
    return view.first


def wait_for_replay(view: Locator, want: dict[str, str], timeout_s: float = CLICK_S) -> dict[str, str] | None:
    deadline = time.monotonic() + timeout_s
    while True:
        got = view.evaluate(REPLAY_JS)
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_replay_slider_in_jupyterlab(lab: Lab, page: Page, shots: Shots) -> None:
    """Drag the replay by keyboard and by its readout, then play it: the drawn frame follows the slider."""
    name = replay_notebook(lab, "replay_live.ipynb")
    open_and_run(page, lab, name)
    model = mirror_replay()
    last = model.state.num_frames - 1
    assert last >= 5 and model.state.trace.frames[0].running, "the recorded run is too short to replay"
    view = find_replay(page)
    view.scroll_into_view_if_needed()
    want = replay_model_state(model, 0)
    assert wait_for_replay(view, want) == want, "the replay does not show the first frame of the run its cell recorded"
    shots.take(view, "replay at step 1")

    handle = view.locator(".noUi-handle").first          # the IntSlider's handle (ipywidgets 8, noUiSlider)
    handle.focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    want = replay_model_state(model, 3)
    got = wait_for_replay(view, want)
    assert got == want, f"after three steps right the browser shows\n{got}\nbut frame 3 is\n{want}"

    readout = view.locator(".widget-readout").first      # type a step into the slider's readout
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(str(last))
    page.keyboard.press("Enter")
    want = replay_model_state(model, last)
    got = wait_for_replay(view, want)
    assert got == want, f"after jumping to the last step the browser shows\n{got}\nbut the last frame is\n{want}"
    assert want["running"] == "" and set(want["refs"].split()) == {"0"}, "the run should end drained"
    shots.take(view, "replay at the last step")

    # Play (jslinked to the slider in the browser) from the start: the frame advances without clicks.
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type("0")
    page.keyboard.press("Enter")
    assert wait_for_replay(view, replay_model_state(model, 0)) == replay_model_state(model, 0)
    view.locator(".widget-play button").first.click()
    deadline = time.monotonic() + CLICK_S
    step = 0
    while time.monotonic() < deadline and step < 2:
        got = view.evaluate(REPLAY_JS)
        step = int(got["step"]) if got else 0
        time.sleep(0.2)
    view.locator(".widget-play button").first.click()     # the same button pauses (ipywidgets 8)
    assert step >= 2, f"play did not advance the replay (still at step {step})"
    time.sleep(1.0)                                       # let the last frame land
    got = view.evaluate(REPLAY_JS)
    assert got == replay_model_state(model, int(got["step"])), "a played frame differs from the recorded one"
    time.sleep(1.5)                                       # paused: over more than three play intervals ...
    assert view.evaluate(REPLAY_JS) == got, "the replay kept moving after pause"
    shots.take(view, "replay after play and pause")


# --- the experiment widgets (chapters 1, 4, 6, 9, 11) ---------------------------------------
# Each is built by the same function the widget benchmark uses (``bench.widgets.WIDGETS``: its chapter's
# arguments); the browser changes the control of the widget's first redraw case, and the picture's
# ``data-state`` must become the one this process's copy draws after the same change.
EXPERIMENT_WIDGETS = ("wastes", "softmax", "scheduler", "blocksize", "routinglab")
DATA_STATE = re.compile(r'<svg\b[^>]*\bclass="(pagedkv-[a-z]+)"[^>]*\bdata-state="([^"]*)"')


def experiment_notebook(lab: Lab, name: str) -> str:
    """Setup, then one cell per experiment widget, each cell's output the widget."""
    chapter = nbformat.read(NOTEBOOK, as_version=4)
    nb = nbformat.v4.new_notebook(metadata={k: v for k, v in chapter.metadata.items() if k != "widgets"})
    nb.cells = [nbformat.v4.new_code_cell("import pagedkv_edu\nfrom pagedkv_edu.bench.widgets import WIDGETS")]
    nb.cells += [nbformat.v4.new_code_cell(f'WIDGETS["{w}"].build()') for w in EXPERIMENT_WIDGETS]
    nbformat.write(nb, lab.workdir / name)
    return name


def drawn_state(html: str) -> tuple[str, str]:
    """The picture's class and its ``data-state``, as the browser's DOM reads them (entities decoded)."""
    import html as html_module
    found = DATA_STATE.search(html)
    assert found, f"no <svg class='pagedkv-...' data-state=...> in {html[:200]!r}"
    return found.group(1), html_module.unescape(found.group(2))


def change_control(page: Page, view: Locator, control: Any, value: Any) -> None:
    """Set ``control`` (found in ``view`` by its description) to ``value`` as a reader would: a menu, a
    slider's readout, or a slider's handle moved with the arrow keys."""
    import ipywidgets as widgets

    label = page.get_by_text(control.description, exact=True)
    if isinstance(control, widgets.Dropdown):
        text = control._options_labels[control._options_values.index(value)]
        view.locator(".widget-dropdown").filter(has=label).locator("select").select_option(label=text)
    elif isinstance(control, widgets.SelectionSlider):
        values = list(control._options_values)
        moves = values.index(value) - values.index(control.value)
        view.locator(".widget-slider").filter(has=label).locator(".noUi-handle").first.focus()
        for _ in range(abs(moves)):
            page.keyboard.press("ArrowRight" if moves > 0 else "ArrowLeft")
    else:                                    # an IntSlider: type into its readout
        readout = view.locator(".widget-slider").filter(has=label).locator(".widget-readout").first
        readout.click()
        page.keyboard.press("Control+A")
        page.keyboard.type(str(value))
        page.keyboard.press("Enter")


def test_experiment_widgets_rerun_in_jupyterlab(lab: Lab, page: Page, shots: Shots) -> None:
    """All five: each draws its chapter's experiment; changing one control reruns it and the picture follows."""
    from pagedkv_edu.bench.widgets import WIDGETS

    name = experiment_notebook(lab, "experiment_widgets.ipynb")
    open_and_run(page, lab, name)
    cells = notebook_panel(page).locator(".jp-CodeCell")
    for k, widget_name in enumerate(EXPERIMENT_WIDGETS, start=1):
        mirror = WIDGETS[widget_name].build()
        svg_class, before = drawn_state(mirror.drawing.value)
        view = cells.nth(k).locator(".jp-OutputArea-output .widget-vbox").filter(
            has=page.locator(f"svg.{svg_class}")).first
        try:
            view.locator(f"svg.{svg_class}").first.wait_for(state="visible", timeout=WIDGET_S * 1000)
        except PlaywrightError as exc:
            raise WidgetMissing(f"no live {widget_name} widget within {WIDGET_S} s") from exc
        view.scroll_into_view_if_needed()
        picture = view.locator(f"svg.{svg_class}").first
        assert picture.get_attribute("data-state") == before, f"{widget_name}: the notebook drew another state"
        attr, value = mirror.redraw_cases()[0]
        control = getattr(mirror, attr)
        change_control(page, view, control, value)
        control.value = value                                  # the same change in this process
        _, want = drawn_state(mirror.drawing.value)
        assert want != before and not mirror.message.value, f"{widget_name}: {attr}={value!r} should redraw"
        deadline = time.monotonic() + CLICK_S
        got = picture.get_attribute("data-state")
        while got != want and time.monotonic() < deadline:
            time.sleep(0.2)
            got = picture.get_attribute("data-state")
        shots.take(view, f"{widget_name} after {attr}")
        assert got == want, f"{widget_name}: after {attr}={value!r} the browser shows\n{got}\nbut the model says\n{want}"
