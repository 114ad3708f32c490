"""The dashboard in a real browser: a head and a worker run an experiment;
headless Chromium (Debian's `chromium`) loads the page the head serves
(--http-endpoint) and the file `ztune report` writes, and runs their scripts.
The rendered page must list every trial in the table and draw one metric line
per trial that reported. Screenshots are kept as test artifacts
($ZTUNE_BUILD_DIR/test-artifacts/dashboard-live.png, dashboard-report.png).
"""

import html.parser
import json
import os
import shutil
import subprocess
import unittest
import urllib.error
import urllib.request

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
    def rendered(self, url):
        dom = chromium("--dump-dom", url)
        self.assertEqual(dom.returncode, 0, dom.stderr[-3000:])
        parsed = Dom()
        parsed.feed(dom.stdout)
        return parsed, dom.stdout

    def screenshot(self, url, name):
        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = os.path.join(ARTIFACTS, name)
        if os.path.exists(shot):
            os.remove(shot)
        out = chromium("--screenshot=" + shot, url)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(shot), 20000)

    def test_a_dashboard_off_loopback_is_refused(self):
        c = LocalCluster(self.addCleanup, "dash-refused", insecure=True)
        out = subprocess.run([client_cluster.HEAD_BIN, "--data-dir", c.data_dir, "--insecure",
                              "--http-endpoint", "0.0.0.0:8265"], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 2, out.stdout + out.stderr)
        self.assertIn("loopback only", out.stderr)
        self.assertIn("ssh -L", out.stderr)

    def test_dashboard_and_report_render_every_trial_in_a_browser(self):
        c = LocalCluster(self.addCleanup, "dash", insecure=True)
        c.start_head("--http-endpoint", "127.0.0.1:0")
        with open(os.path.join(c.dir, "endpoints.json")) as f:
            url = json.load(f)["http_endpoint"]
        self.assertRegex(url, r"^http://127\.0\.0\.1:\d+/$")
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

        trial_ids = [f"{exp}_{i:05d}" for i in range(len(lrs))]
        # The same page twice: served live by the head, and as the report file.
        for where, name in ((url, "dashboard-live.png"), ("file://" + page, "dashboard-report.png")):
            with self.subTest(where=where):
                parsed, text = self.rendered(where)
                self.assertEqual(sorted(parsed.rows), trial_ids, text[-3000:])
                self.assertEqual(sorted(parsed.lines), trial_ids)  # one line per trial
                self.assertEqual(sorted(parsed.pc_lines), trial_ids)
                self.assertIn("</script><b>bold</b>", parsed.cells)  # text, not markup
                self.assertIn("TERMINATED", parsed.cells)
                self.screenshot(where, name)

        # Its data as JSON; requests addressed to another name are refused
        # (DNS rebinding), and so is an unknown experiment.
        with urllib.request.urlopen(url + "api/dashboard?experiment=" + exp, timeout=30) as r:
            data = json.load(r)
        self.assertEqual(data["experiment_id"], exp)
        self.assertEqual(sorted(data["series"]), trial_ids)
        self.assertEqual([len(data["series"][t]) for t in trial_ids], [8] * len(lrs))
        forged = urllib.request.Request(url, headers={"Host": "attacker.example:80"})
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(forged, timeout=30)
        self.assertEqual(refused.exception.code, 403)
        with self.assertRaises(urllib.error.HTTPError) as unknown:
            urllib.request.urlopen(url + "api/dashboard?experiment=e0999", timeout=30)
        self.assertEqual(unknown.exception.code, 404)


if __name__ == "__main__":
    unittest.main()
