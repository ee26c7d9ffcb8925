"""The daemon's web page in a real headless browser (Debian's chromium + chromedriver, driven by selenium).

The daemon runs on the local control plane in detect-only mode; `kubectl scale` makes drift, and the
page (refreshing itself) must show it with the actor in words within 2 s. Screenshots of every view go to
.cache/artifacts/web/ (gitignored; their paths are printed). Selenium is pointed at /usr/bin/chromedriver
explicitly, so its own driver download manager never runs, and chromium resolves no host but loopback.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import KubeCluster

from tests.integration.daemon_support import REPO_ROOT, Daemon, GitRepo, configmap, deployment, wait_until

pytestmark = pytest.mark.cluster

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = REPO_ROOT / ".cache" / "artifacts" / "web"
EVIL = '<script>document.title="pwned"</script>'


def _driver(width: int = 1200, height: int = 900) -> Any:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("Debian's chromium and chromium-driver are needed (.ci/run installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # nothing but loopback
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(executable_path=str(CHROMEDRIVER)))


@pytest.fixture
def browser() -> Iterator[Any]:
    driver = _driver()
    try:
        yield driver
    finally:
        driver.quit()


def _console_errors(driver: Any) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def _shot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 1000
    print(f"screenshot: {path}")
    return path


def _fetch(port: int, path: str, token: str | None = None) -> tuple[int, dict[str, str], str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status), {k.lower(): v for k, v in r.headers.items()}, r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), {k.lower(): v for k, v in e.headers.items()}, e.read().decode()


def _synced_daemon(kube: KubeCluster, namespace: str, tmp_path: Path, *args: str) -> tuple[Daemon, GitRepo]:
    repo = GitRepo(
        tmp_path / "repo",
        {
            "web.yaml": deployment("web", 2),
            "api.yaml": deployment("api", 1),
            "page.yaml": configmap("page", {"index.html": EVIL, "color": "blue"}),
        },
    )
    sync = subprocess.run(
        [sys.executable, "-m", "gitops_sync", "sync", "--repo", str(repo.path), "-n", namespace],
        env=kube.env,
        capture_output=True,
        text=True,
        check=False,
        timeout=90,
    )
    assert sync.returncode == 0, sync.stdout + sync.stderr
    d = Daemon(["--repo", str(repo.path), "-n", namespace, *args], kube.env, tmp_path / "daemon.log")
    d.wait_ready()
    return d, repo


def test_page_shows_kubectl_scale_drift_within_2s_and_the_ownership_timeline(
    kube: KubeCluster, namespace: str, tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    d, _ = _synced_daemon(kube, namespace, tmp_path, "--detect-only")
    with d:
        base = f"http://127.0.0.1:{d.port}"
        browser.get(base + "/")
        source = browser.find_element(By.CSS_SELECTOR, ".sources h2 a")
        assert "ready" in browser.find_element(By.CSS_SELECTOR, ".sources h2").text
        source.click()
        wait_until("the objects list", lambda: browser.find_elements(By.CSS_SELECTOR, "table.objects .name"), 5)
        names = {e.text for e in browser.find_elements(By.CSS_SELECTOR, "table.objects .name")}
        assert names == {"web", "api", "page"}
        objects_url = browser.current_url
        wait_until("live refresh to start", lambda: "live" in browser.find_element(By.ID, "live-note").text, 3)

        kube.kubectl("scale", "deployment/web", "-n", namespace, "--replicas=5")
        t0 = time.monotonic()

        def web_row() -> str:
            for row in browser.find_elements(By.CSS_SELECTOR, "table.objects tr.row"):
                if row.find_element(By.CSS_SELECTOR, ".name").text == "web":
                    return str(row.text)
            return ""

        seen: list[str] = []

        def shows_drift() -> bool:
            try:
                text = web_row()
            except Exception:  # the list was swapped while being read: read it again
                return False
            seen.append(text)
            return "drifted" in text and "kubectl scale" in text

        try:
            wait_until("the page to show the drift by kubectl scale", shows_drift, 2.0, interval=0.05)
        except pytest.fail.Exception:
            pytest.fail(f"no drift by kubectl scale on the page within 2 s; row: {seen[-1:]}\n{d.log_tail()}")
        took = time.monotonic() - t0
        print(f"web page: drift by kubectl scale shown {took:.3f} s after `kubectl scale` returned")
        assert browser.title != "pwned"
        _shot(browser, "objects")

        # the object: desired vs live, owner in words, the field's ownership timeline
        link = next(a for a in browser.find_elements(By.CSS_SELECTOR, "td.obj a") if "web" in a.text)
        link.click()
        wait_until("the object page", lambda: browser.find_elements(By.CSS_SELECTOR, "table.fields"), 5)
        object_url = browser.current_url
        replicas = next(
            r for r in browser.find_elements(By.CSS_SELECTOR, "table.fields tr") if ".spec.replicas" in r.text
        )
        assert "kubectl scale" in replicas.text and "kubectl (Update, subresource scale)" in replicas.text
        cells = [c.text for c in replicas.find_elements(By.CSS_SELECTOR, "pre.value")]
        assert cells == ["2", "5"], cells  # desired (Git), live
        timeline = browser.find_element(By.CSS_SELECTOR, "details.timeline[data-key='.spec.replicas']")
        steps = [li.text for li in timeline.find_elements(By.TAG_NAME, "li")]
        assert len(steps) == 2 and "Git (this tool)" in steps[0] and "kubectl scale" in steps[1], steps
        _shot(browser, "object")

        # the ConfigMap's markup is text, not markup
        browser.get(objects_url)
        browser.find_element(By.XPATH, "//td[@class='obj']/a[span[@class='name']='page']").click()
        try:
            wait_until("the ConfigMap page", lambda: "index.html" in browser.page_source, 5)
        except pytest.fail.Exception:
            pytest.fail(f"{objects_url} -> {browser.current_url}")
        assert EVIL in browser.find_element(By.TAG_NAME, "main").text
        assert browser.title != "pwned"

        browser.get(base + "/")
        time.sleep(1.5)  # one refresh round trip, so its errors (if any) are in the log
        _shot(browser, "sources")
        errors = _console_errors(browser)
        assert errors == [], errors

        # narrow: a phone-sized viewport; nothing may scroll sideways on the objects list
        browser.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride", {"width": 375, "height": 800, "deviceScaleFactor": 1, "mobile": True}
        )
        browser.get(objects_url)
        wait_until("the objects list", lambda: browser.find_elements(By.CSS_SELECTOR, "table.objects .name"), 5)
        scroll, inner = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
        print(f"web page at 375 px: scrollWidth {scroll}, innerWidth {inner}")
        assert inner == 375 and scroll <= inner
        _shot(browser, "objects-narrow")
        browser.get(object_url)
        scroll, inner = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
        assert scroll <= inner, (scroll, inner)
        assert _console_errors(browser) == []

        # without JavaScript: the server-rendered page and its filter (a plain GET) work alike
        browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
        browser.get(objects_url)
        browser.find_element(By.NAME, "q").send_keys("web")
        browser.find_element(By.CSS_SELECTOR, "form.filter button").click()
        wait_until("the filtered list", lambda: "q=web" in browser.current_url, 5)
        names = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "table.objects .name")]
        assert names == ["web"] and browser.find_element(By.ID, "live-note").text == ""  # app.js did not run
        code, headers, html = _fetch(d.port, urllib.parse.urlparse(objects_url).path + "?state=drifted&q=web")
        assert code == 200 and "kubectl scale" in html
        assert headers["content-security-policy"].startswith("default-src 'none'")
        assert headers["x-content-type-options"] == "nosniff"
        rows = html.count('<tr class="row')
        assert rows == 1, html
        assert d.stop() == 0


def test_page_needs_a_token_with_http_auth_kubernetes(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    role = f"t-page-viewer-{namespace}"  # cluster-scoped: named after the namespace, deleted at the end
    for sa in ("stranger", "viewer"):
        kube.kubectl("create", "serviceaccount", sa, "-n", namespace)
    kube.kubectl("create", "clusterrole", role, "--verb=get", "--non-resource-url=/")
    try:
        kube.kubectl(
            "create", "clusterrolebinding", role, f"--clusterrole={role}", f"--serviceaccount={namespace}:viewer"
        )
        stranger, viewer = (
            kube.kubectl("create", "token", sa, "-n", namespace, "--duration=1h").stdout.strip()
            for sa in ("stranger", "viewer")
        )
        d, _ = _synced_daemon(kube, namespace, tmp_path, "--detect-only", "--http-auth", "kubernetes")
        with d:
            for path in ("/", "/sources/x", "/status"):
                code, headers, body = _fetch(d.port, path)
                assert code == 401, path
                assert headers.get("www-authenticate", "").startswith("Bearer")
                assert namespace not in body  # nothing of the cluster before the token is checked
            assert _fetch(d.port, "/", stranger)[0] == 403  # a valid token, but no RBAC rule for the URL
            code, _, html = _fetch(d.port, "/", viewer)
            assert code == 200 and "Sources" in html
            assert _fetch(d.port, "/healthz")[0] == 200

            # a browser cannot add a header: /login checks the token once and keeps it in an HttpOnly cookie
            req = urllib.request.Request(
                f"http://127.0.0.1:{d.port}/login", data=urllib.parse.urlencode({"token": viewer}).encode()
            )
            opener = urllib.request.build_opener(_NoRedirect)
            try:
                opener.open(req, timeout=10)
                pytest.fail("expected a redirect")
            except urllib.error.HTTPError as e:
                assert e.code == 303
                cookie = e.headers["Set-Cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
            req = urllib.request.Request(f"http://127.0.0.1:{d.port}/", headers={"Cookie": cookie.split(";")[0]})
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200 and namespace in r.read().decode()
            assert d.stop() == 0
    finally:
        kube.kubectl("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found", check=False)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
