"""The dashboard's report panel answers `evlog report --what-if` for 1 .. 2x the recorded workers when asked
(a button: the replay of a big run takes seconds), in headless Chromium on a synthetic run folder."""
from __future__ import annotations

import json

from helpers import NEEDS_CHROMIUM, click_element, evlog_cli, start_view, stop_view

pytestmark = NEEDS_CHROMIUM


def test_the_dashboards_report_panel_draws_the_curve_when_asked(synthetic_dask_run, tmp_path, browser):
    """The report panel's What if: a button replays the run on 1 .. 2x its workers (api/what-if), the
    answer the HTML report's curve on the same run, drawn as a chart with its figures in words."""
    page = tmp_path / "r.html"
    assert evlog_cli("report", synthetic_dask_run, "--format", "html", "-o", str(page), "--what-if", "workers=1").returncode == 0
    html = page.read_text()
    expected = json.loads(html.split('<script id="report-data" type="application/json">')[1].split("</script>")[0])
    proc, url = start_view(synthetic_dask_run)
    try:
        browser.goto(url)
        browser.wait_js("document.getElementById('report-section').getAttribute('data-loaded')", what="the report")
        assert browser.js("document.getElementById('what-if-predict').textContent") == "Predict"
        assert not browser.js("document.querySelector('#what-if .what-if-line')")  # nothing replayed before it is asked
        click_element(browser, "#what-if-predict")
        line = browser.wait_js("(document.querySelector('#what-if .what-if-line') || {}).textContent", what="the prediction")
        got = browser.js("EV.api('api/what-if')")
        assert got["curve"] == expected["what_if_curve"], (got["curve"], expected["what_if_curve"])
        assert line.startswith("Recorded on 2 workers (2 threads each): "), line
        predicted = line.split(". Predicted: ")[1].rstrip(".").split(" · ")
        assert [x.split(" worker")[0] for x in predicted] == [str(w) for w in got["curve"]["workers"]], line
        assert browser.js("document.querySelectorAll('#what-if canvas').length") >= 1  # uPlot's chart
        assert browser.js("document.querySelectorAll('#what-if .what-if-model li').length") == len(got["lines"]) > 0
        assert browser.js("document.getElementById('what-if-predict').textContent") == "Predict again"
    finally:
        stop_view(proc)
