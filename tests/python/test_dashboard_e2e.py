"""`ztune report` in a real browser: a head and a worker run an experiment,
the CLI writes its dashboard page, headless Chromium (Debian's `chromium`)
loads it and runs its scripts; the rendered page must list every trial in
the table and draw one metric line per trial that reported. A screenshot is
kept as a test artifact ($ZTUNE_BUILD_DIR/test-artifacts/dashboard-report.png).
"""

import html.parser
import os
import shutil
import subprocess
import unittest

import client_cluster
from client_cluster import LocalCluster

from ztune.client import Client

MISSING = client_cluster.missing_binaries()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = os.path.join(client_cluster.BUILD_DIR, "test-artifacts")


def chromium(*args):
    # --no-sandbox: the tests run as root in CI; the page is our own file.
    return subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", "--virtual-time-budget=5000",
                           "--window-size=1300,1800", *args],
                          capture_output=True, text=True, timeout=120)


class Dom(html.parser.HTMLParser):
    """Trial rows, metric lines and table cells of the rendered page."""

    def __init__(self):
        super().__init__()
        self.rows, self.lines, self.pc_lines, self.cells = [], [], [], []
        self._in_td = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "tr" and "trial-row" in classes:
            self.rows.append(a.get("data-trial"))
        if tag == "path" and "trial-line" in classes:
            self.lines.append(a.get("data-trial"))
        if tag == "path" and "pc-line" in classes:
            self.pc_lines.append(a.get("data-trial"))
        self._in_td = tag == "td"

    def handle_data(self, data):
        if self._in_td:
            self.cells.append(data)

    def handle_endtag(self, tag):
        if tag == "td":
            self._in_td = False


@unittest.skipIf(MISSING, f"ztune binaries not built: {MISSING}")
@unittest.skipIf(CHROMIUM is None,
                 "chromium is not installed (scripts/install-deps.sh installs it for the tests)")
class DashboardReportTest(unittest.TestCase):
    def test_report_renders_every_trial_in_a_browser(self):
        c = LocalCluster(self.addCleanup, "dash", insecure=True)
        c.start_head()
        c.start_worker("w0", 2)
        client = Client(c.client_endpoint, insecure=True, timeout_s=10)
        self.addCleanup(client.close)
        lrs = [0.05, 0.1, 0.2, 0.3]
        # A config string that would end the page's script if written raw.
        spec = {"name": "dash", "trainable": "quadratic",
                "param_space": {"lr": {"grid_search": lrs}, "x0": 10, "target": 0,
                                "note": "</script><b>bold</b>"},
                "metric": "loss", "mode": "min", "stop": {"training_iteration": 8}, "seed": 1}
        exp = client.submit(spec)
        self.assertTrue(client.wait(exp, poll_s=0.05, timeout_s=60)["finished"], c.logs())
        page = os.path.join(c.dir, "report.html")
        out = subprocess.run([client_cluster.CLI_BIN, "--head", c.client_endpoint, "--insecure",
                              "report", exp, "-o", page], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stderr.strip(), f"wrote {page} ({len(lrs)} trials, {len(lrs) * 8} results)")

        dom = chromium("--dump-dom", "file://" + page)
        self.assertEqual(dom.returncode, 0, dom.stderr[-3000:])
        parsed = Dom()
        parsed.feed(dom.stdout)
        trial_ids = [f"{exp}_{i:05d}" for i in range(len(lrs))]
        self.assertEqual(sorted(parsed.rows), trial_ids, dom.stdout[-3000:])
        self.assertEqual(sorted(parsed.lines), trial_ids)  # one line per trial
        self.assertEqual(sorted(parsed.pc_lines), trial_ids)
        self.assertIn("</script><b>bold</b>", parsed.cells)  # shown as text, not markup
        self.assertIn("TERMINATED", parsed.cells)

        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = os.path.join(ARTIFACTS, "dashboard-report.png")
        if os.path.exists(shot):
            os.remove(shot)
        out = chromium("--screenshot=" + shot, "file://" + page)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(shot), 20000)


if __name__ == "__main__":
    unittest.main()
