"""The daemon's web page in a real headless browser (Debian's chromium + chromedriver, driven by selenium).

The daemon runs on the local control plane in detect-only mode; `kubectl scale` makes drift, and the
page (refreshing itself) must show it with the actor in words within 2 s. Screenshots of every view go to
.cache/artifacts/web/ (gitignored; their paths are printed). Selenium is pointed at /usr/bin/chromedriver
explicitly, so its own driver download manager never runs, and chromium resolves no host but loopback.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BROWSER, KubeCluster
from tests.integration.daemon_support import REPO_ROOT, Daemon, GitRepo, configmap, deployment, sync_once, wait_until
from tests.integration.test_fleet import crd, fleet_args, gitsync, wait_ready

__all__ = ["crd"]  # the module-scoped fixture, shared

pytestmark = [pytest.mark.cluster, BROWSER]

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
    sync_once(kube.env, repo.path, namespace)
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

        # deleted by hand under --detect-only: missing, no live column, no field "in sync" (before: every field
        # was "in sync" with the last recorded values shown as live ones)
        kube.kubectl("delete", "deployment", "api", "-n", namespace)
        api_url = objects_url + f"/objects/apps/Deployment/{namespace}/api"
        browser.get(api_url)
        wait_until("the api Deployment missing", lambda: "Not in the cluster" in browser.page_source, 10, interval=0.2)
        headers = _js(browser, "return [...document.querySelectorAll('table.fields th')].map(t => t.textContent)")
        main = _js(browser, "return document.querySelector('main').innerText")
        kinds = _js(
            browser, "return [...document.querySelectorAll('table.fields tr[class^=k-]')].map(r => r.className)"
        )
        print(f"fields of the deleted Deployment: {kinds}")
        assert "live" not in headers and "last seen in the cluster" in headers and "in sync" not in main, main
        assert kinds and set(kinds) == {"k-missing"}, kinds
        _shot(browser, "object-missing")

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


B_MARKER = "team-b-only-value-5e1f07"


def _sign_in(browser: Any, base: str, token: str) -> None:
    """The browser signs in as a person does: the form the page shows, the token pasted, submitted."""
    from selenium.webdriver.common.by import By

    browser.delete_all_cookies()
    browser.get(base + "/")
    browser.find_element(By.NAME, "token").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "form.filter button").click()
    wait_until("the sources page after sign-in", lambda: browser.find_elements(By.CSS_SELECTOR, "ul.sources"), 10)


def _js(browser: Any, script: str) -> Any:
    """Read the page in one go: the live refresh swaps <main> every second, so elements found earlier go stale."""
    return browser.execute_script(script)


def _listed(browser: Any) -> set[str]:
    return set(_js(browser, "return [...document.querySelectorAll('.sources h2 a')].map(a => a.textContent)"))


def test_each_tenant_sees_only_the_gitsyncs_it_may_get_and_a_deleted_object_is_never_in_sync(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path, browser: Any
) -> None:
    """A fleet with GitSyncs team-a and team-b; reader-a may get only team-a, reader-b only team-b (Roles with
    resourceNames: the controller watches one namespace here), ops every GitSync of the namespace. Each signs in
    with its token in Chromium. Before, any token allowed `get /` saw every tenant's GitSyncs and values, and
    a ConfigMap deleted by hand under detect-only was listed with every field `in sync`."""
    from selenium.webdriver.common.by import By

    a = GitRepo(
        tmp_path / "a",
        {
            "apps/settings.yaml": configmap("a-settings", {"color": "blue"}),
            "apps/page.yaml": configmap("a-page", {"title": "hello"}),
        },
    )
    b = GitRepo(tmp_path / "b", {"db.yaml": configmap("b-db", {"password-hint": B_MARKER})})
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input="---\n".join(
            [
                gitsync("team-a", namespace, a.path, path="apps"),
                gitsync("team-b", namespace, b.path, dependsOn=[{"name": "team-a"}]),
            ]
        ),
    )
    tokens = {}
    for reader, names in (("reader-a", ["team-a"]), ("reader-b", ["team-b"]), ("ops", [])):
        kube.kubectl("create", "serviceaccount", reader, "-n", namespace)
        rule = [f"--resource-name={n}" for n in names]
        kube.kubectl(
            "create", "role", reader, "-n", namespace, "--verb=get", "--resource=gitsyncs.gitops-sync.io", *rule
        )
        kube.kubectl(
            "create",
            "rolebinding",
            reader,
            "-n",
            namespace,
            f"--role={reader}",
            f"--serviceaccount={namespace}:{reader}",
        )
        tokens[reader] = kube.kubectl("create", "token", reader, "-n", namespace, "--duration=1h").stdout.strip()
    kube.kubectl("create", "serviceaccount", "nobody", "-n", namespace)
    tokens["nobody"] = kube.kubectl("create", "token", "nobody", "-n", namespace, "--duration=1h").stdout.strip()
    args = fleet_args(namespace, tmp_path, "--http-auth", "kubernetes")
    with Daemon(args, kube.env, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        for name in ("team-a", "team-b"):
            wait_ready(kube, namespace, name)
        # team-a goes detect-only; someone deletes a-page by hand: it is missing, never "in sync"
        kube.kubectl(
            "patch", "gitsync", "team-a", "-n", namespace, "--type=merge", "-p", '{"spec":{"mode":"detect-only"}}'
        )
        wait_ready(kube, namespace, "team-a")  # Ready for generation 2, the detect-only one
        kube.kubectl("delete", "configmap", "a-page", "-n", namespace)
        base = f"http://127.0.0.1:{d.port}"

        _sign_in(browser, base, tokens["reader-a"])
        assert _listed(browser) == {f"{namespace}/team-a"}
        card = _js(browser, "return document.querySelector('.sources li').innerText")
        assert "apps" in card and "nothing" in card  # path; depends on nothing
        assert "team-b" not in browser.page_source and B_MARKER not in browser.page_source
        _shot(browser, "tenant-a-sources")
        browser.get(base + f"/sources/{namespace}/team-a")
        rows_js = (
            "return [...document.querySelectorAll('table.objects tr.row')].map(r => "
            "[r.querySelector('.name').textContent, r.className.split('st-row-')[1]])"
        )
        wait_until("a-page listed as missing", lambda: ["a-page", "missing"] in _js(browser, rows_js), 30, interval=0.2)
        page = _js(
            browser,
            "return {counts: Object.fromEntries([...document.querySelectorAll('dl.counts .count')].map(c => "
            "[c.querySelector('dt').textContent, +c.querySelector('dd').textContent])), rows: "
            + rows_js.removeprefix("return ")
            + "}",
        )
        states = [state for _, state in page["rows"]]
        for state in ("synced", "drifted", "missing", "conflict", "yielded", "error"):
            assert page["counts"][state] == states.count(state), page
        assert page["counts"]["missing"] == 1
        href = _js(
            browser,
            "return [...document.querySelectorAll('td.obj a')].find(a => a.querySelector('.name')"
            ".textContent === 'a-page').getAttribute('href')",
        )
        browser.get(base + href)
        wait_until("the object page", lambda: "Not in the cluster" in browser.page_source, 10)
        headers = _js(browser, "return [...document.querySelectorAll('table.fields th')].map(t => t.textContent)")
        main = _js(browser, "return document.querySelector('main').innerText")
        assert "live" not in headers and "in sync" not in main, (headers, main)
        assert "--detect-only" in main
        _shot(browser, "tenant-a-missing")
        errors = [e for e in _console_errors(browser) if "status of 401" not in e["message"]]  # the sign-in form's
        assert errors == [], errors
        # another tenant's GitSync and its objects are not found, whatever the URL
        for path in (
            f"/sources/{namespace}/team-b",
            f"/sources/{namespace}/team-b/objects/core/ConfigMap/{namespace}/b-db",
        ):
            browser.get(base + path)
            assert browser.find_element(By.TAG_NAME, "h1").text == "Not found"
            assert B_MARKER not in browser.page_source

        _sign_in(browser, base, tokens["reader-b"])
        assert _listed(browser) == {f"{namespace}/team-b"}
        assert f"{namespace}/team-a" in _js(browser, "return document.querySelector('.sources li').innerText")
        own = base + f"/sources/{namespace}/team-b/objects/core/ConfigMap/{namespace}/b-db"

        def own_values() -> bool:  # its own values: it may get its GitSync
            browser.get(own)
            return B_MARKER in browser.page_source

        wait_until("reader-b to see b-db's values", own_values, 20, interval=0.5)

        _sign_in(browser, base, tokens["ops"])
        assert _listed(browser) == {f"{namespace}/team-a", f"{namespace}/team-b"}
        _shot(browser, "tenant-ops-sources")
        _sign_in(browser, base, tokens["nobody"])
        assert _listed(browser) == set() and "No GitSync you may" in browser.page_source
        assert d.stop() == 0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
