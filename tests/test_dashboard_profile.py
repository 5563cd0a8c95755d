"""The dashboard's flame graphs of the task profile (issue 31) in headless chromium, on a real Dask run of 2
worker processes under evlog-instrument shown by `evlog view`: one per task prefix, narrowed by the worker
selector, and a clicked task's own samples."""
from __future__ import annotations

import pytest
from helpers import NEEDS_CHROMIUM, PROFILE_DASK_APP, PROFILE_TASKS, click_bar, click_element, no_exceptions, open_page, viewed

pytestmark = NEEDS_CHROMIUM


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("profile-view")
    (tmp / "tasks.py").write_text(PROFILE_TASKS)
    with viewed(tmp, PROFILE_DASK_APP, PYTHONPATH=str(tmp)) as url:
        yield url


def _frames(browser, selector: str) -> list[str]:
    return browser.js(f"Array.from(document.querySelectorAll({selector!r} + ' svg g')).map(g => g.textContent)")


def _samples(note: str) -> int:
    return int(note.split(" samples")[0].replace(",", ""))


def test_the_flame_graph_of_each_prefix_draws_its_hottest_function(view, browser):
    open_page(browser, view)
    browser.wait_js("!document.getElementById('profile-section').hidden && "
                    "document.querySelectorAll('#flame svg rect').length > 2", what="the flame graph")
    labels = browser.js("Array.from(document.querySelectorAll('#profile-labels button')).map(b => b.dataset.label)")
    assert sorted(labels) == ["crunch", "parse"]
    first = browser.js("document.getElementById('flame').dataset.label")
    want = {"parse": "slow_parse_inner", "crunch": "crunch_numbers"}
    assert any(want[first] in f for f in _frames(browser, "#flame"))
    other = next(x for x in labels if x != first)
    click_element(browser, f"#profile-labels button[data-label={other!r}]")
    browser.wait_js(f"document.getElementById('flame').dataset.label === {other!r}", what="the other prefix's graph")
    frames = _frames(browser, "#flame")
    assert any(want[other] in f for f in frames) and not any(want[first] in f for f in frames)
    # the root frame is the prefix, the task's function above it, its hot function on top
    assert browser.js("document.querySelector('#flame svg g').textContent").startswith(other)
    no_exceptions(browser)


def test_the_worker_selector_narrows_the_flame_graph_to_one_worker(view, browser):
    open_page(browser, view)
    browser.wait_js("document.querySelectorAll('#flame svg rect').length > 2", what="the flame graph")
    note = browser.js("document.getElementById('profile-note').textContent")
    assert "on all workers" in note
    label = browser.js("document.getElementById('flame').dataset.label")
    click_element(browser, f"#profile-labels button[data-label={label!r}]")  # kept when the worker changes
    workers = browser.js("Array.from(document.getElementById('worker').options).map(o => o.value)"
                         ".filter(v => v.startsWith('tcp://'))")
    assert len(workers) == 2
    per = 0
    for worker in workers:  # each worker's graph has its own samples: together, all of them
        browser.js("(() => { const s = document.getElementById('worker'); s.value = %r; "
                   "s.dispatchEvent(new Event('change')); })()" % worker)
        browser.wait_js("document.getElementById('profile-note').textContent.includes(%r)" % worker,
                        what="one worker's graph")
        one = browser.js("document.getElementById('profile-note').textContent")
        per += _samples(one) if f" of {label} on " in one else 0  # a worker that ran none shows another prefix
    # all workers again, read now: the page opened while the run folder was still being stored
    browser.js("(() => { const s = document.getElementById('worker'); s.value = ''; "
               "s.dispatchEvent(new Event('change')); })()")
    browser.wait_js("document.getElementById('profile-note').textContent.includes('on all workers')",
                    what="all workers' graph")
    note = browser.js("document.getElementById('profile-note').textContent")
    assert per == _samples(note), (per, note)
    assert browser.js("document.querySelectorAll('#flame svg rect').length") > 2
    no_exceptions(browser)


def test_a_clicked_task_shows_its_own_samples(view, browser):
    open_page(browser, view)
    click_bar(browser, "EV.gantt.data.prefixes[b[3]] === 'crunch'")
    browser.wait_js("document.querySelector('#task-body .task-flame svg rect') !== null", what="the task's flame graph")
    box = browser.js("(() => { const b = document.querySelector('#task-body .task-flame'); "
                     "return {label: b.dataset.label, span: b.dataset.span}; })()")
    assert box["label"] == "crunch" and len(box["span"]) == 16
    assert any("crunch_numbers" in f for f in _frames(browser, "#task-body .task-flame"))
    # the same span id as the clicked bar's span, whose attributes name the same function
    assert browser.js("EV.state.task.id") is not None
    no_exceptions(browser)
