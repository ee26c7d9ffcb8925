"""Charts from repositories, the parts that need no registry: the archive bounds (hostile archives built
here with tarfile, unpacked for real), semver ranges and helm-chart.yaml validation."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gitops_sync.errors import RenderError
from gitops_sync.render import _chart_archive, charts
from gitops_sync.render._semver import Range, RangeError, is_exact

CHART_YAML = b"apiVersion: v2\nname: hello\nversion: 0.1.0\n"


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as out:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            out.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"x: 1\n") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _special(name: str, kind: bytes, target: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def test_a_good_archive_unpacks(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "a.tgz", [_file("hello/Chart.yaml", CHART_YAML), _file("hello/templates/cm.yaml")])
    dest = tmp_path / "out"
    dest.mkdir()
    assert _chart_archive.unpack(archive, dest, charts.ChartLimits()) == "hello"
    assert (dest / "hello" / "Chart.yaml").read_bytes() == CHART_YAML
    assert (dest / "hello" / "templates" / "cm.yaml").is_file()


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([_file("hello/Chart.yaml", CHART_YAML), _file("hello/../../evil.yaml")], "leaving its directory"),
        ([_file("hello/Chart.yaml", CHART_YAML), _file("/etc/evil.yaml")], "absolute or malformed"),
        ([_file("hello/Chart.yaml", CHART_YAML), _special("hello/x.yaml", tarfile.SYMTYPE, "/etc/passwd")], "a link"),
        (
            [_file("hello/Chart.yaml", CHART_YAML), _special("hello/y.yaml", tarfile.LNKTYPE, "hello/Chart.yaml")],
            "a link",
        ),
        ([_file("hello/Chart.yaml", CHART_YAML), _special("hello/dev", tarfile.CHRTYPE)], "a special file"),
        ([_file("hello/Chart.yaml", CHART_YAML), _special("hello/fifo", tarfile.FIFOTYPE)], "a special file"),
        ([_file("hello/Chart.yaml", CHART_YAML), _file("other/Chart.yaml", CHART_YAML)], "more than one top-level"),
        ([_file("hello/values.yaml")], "no <chart>/Chart.yaml"),
        ([_file("hello/Chart.yaml", CHART_YAML), _file("hello/Chart.yaml", CHART_YAML)], "one path twice"),
    ],
)
def test_hostile_archives_are_refused_and_nothing_lands_outside(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], message: str
) -> None:
    archive = _tar(tmp_path / "bad.tgz", members)
    dest = tmp_path / "a" / "b" / "out"
    dest.mkdir(parents=True)
    with pytest.raises(RenderError, match=message):
        _chart_archive.unpack(archive, dest, charts.ChartLimits())
    assert not (tmp_path / "a" / "evil.yaml").exists() and not (tmp_path / "evil.yaml").exists()
    assert not any(p.is_symlink() for p in dest.rglob("*"))


def test_too_many_entries(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "many.tgz", [_file("hello/Chart.yaml", CHART_YAML)] + [_file(f"hello/f{i}") for i in range(30)]
    )
    with pytest.raises(RenderError, match="more than 20 entries"):
        _chart_archive.unpack(archive, tmp_path, charts.ChartLimits(max_files=20))


def test_a_compression_bomb_is_stopped_by_the_unpacked_size(tmp_path: Path) -> None:
    """64 MiB of zeros compress to ~64 KiB: the archive is small, its header sizes are not."""
    archive = _tar(
        tmp_path / "bomb.tgz", [_file("hello/Chart.yaml", CHART_YAML), _file("hello/zeros", bytes(64 << 20))]
    )
    assert archive.stat().st_size < 1 << 20
    with pytest.raises(RenderError, match="unpacks to more than"):
        _chart_archive.unpack(archive, tmp_path, charts.ChartLimits(max_unpacked_bytes=16 << 20))
    assert not (tmp_path / "hello" / "zeros").exists()


def test_an_oversized_archive_is_refused_before_reading(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "big.tgz", [_file("hello/Chart.yaml", CHART_YAML)])
    with pytest.raises(RenderError, match="over the 10-byte limit"):
        _chart_archive.unpack(archive, tmp_path, charts.ChartLimits(max_archive_bytes=10))


def test_not_an_archive(tmp_path: Path) -> None:
    bad = tmp_path / "x.tgz"
    bad.write_bytes(gzip.compress(b"not a tar file at all" * 40))
    with pytest.raises(RenderError, match="cannot be read"):
        _chart_archive.unpack(bad, tmp_path, charts.ChartLimits())


# ---------------------------------------------------------------------------------------------- semver

VERSIONS = ["0.1.0", "0.2.0", "0.2.1", "1.0.0-rc.1", "1.0.0", "1.4.2", "2.0.0"]


@pytest.mark.parametrize(
    ("text", "best"),
    [
        ("0.2.0", "0.2.0"),
        (">=0.1.0 <1.0.0", "0.2.1"),
        (">= 0.2, < 0.2.1", "0.2.0"),
        ("^0.2", "0.2.1"),
        ("~0.2.0", "0.2.1"),
        ("0.x", "0.2.1"),
        ("*", "2.0.0"),
        ("^1", "1.4.2"),
        ("1.0 - 1.4", "1.4.2"),
        ("<1.0.0 || >=2.0.0", "2.0.0"),
        (">=1.0.0-0 <1.0.0", "1.0.0-rc.1"),  # names a pre-release: pre-releases count
        ("~1.0.0", "1.0.0"),  # never the rc: the range names no pre-release
        (">3", None),
    ],
)
def test_ranges_pick_the_highest_allowed_version(text: str, best: str | None) -> None:
    assert Range.parse(text).best(VERSIONS) == best


def test_exact_versions_and_errors() -> None:
    assert is_exact("1.2.3") and is_exact("v1.2.3") and is_exact("1.2.3-rc.1+build.5")
    assert not is_exact("1.2.x") and not is_exact(">=1") and not is_exact("1.2")
    for bad in ("foo", ">=", "1.2.3.4", "!=1.2"):
        with pytest.raises(RangeError):
            Range.parse(bad)


# ---------------------------------------------------------------------------------------------- helm-chart.yaml


def _spec(tmp_path: Path, body: object) -> Path:
    path = tmp_path / "helm-chart.yaml"
    path.write_text(json.dumps(body))
    return path


def test_a_full_spec(tmp_path: Path) -> None:
    (tmp_path / "helm-values.yaml").write_text("a: 1\n")
    body = {"repo": "oci://r.example/charts/", "chartName": "podinfo", "chartVersion": "^6", "values": {"b": 2}}
    spec = charts.load_spec(_spec(tmp_path, {"helmChart": body}), "apps/helm-chart.yaml")
    assert spec == charts.ChartSpec(
        "oci://r.example/charts", "podinfo", "^6", "podinfo", None, ("helm-values.yaml",), {"b": 2}
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"chart": {}}, "expected one mapping `helmChart:`"),
        ({"helmChart": {"repo": "https://h", "chartName": "c", "chartVersion": 1.0}}, "quote a version"),
        ({"helmChart": {"repo": "ftp://h", "chartName": "c", "chartVersion": "1"}}, "https://"),
        ({"helmChart": {"repo": "https://u:s3cret@h", "chartName": "c", "chartVersion": "1"}}, "credentials"),
        ({"helmChart": {"repo": "https://h", "chartName": "../c", "chartVersion": "1"}}, "chart name"),
        ({"helmChart": {"repo": "https://h", "chartName": "c", "chartVersion": "1", "vals": {}}}, "helmChart.vals"),
        ({"helmChart": {"repo": "https://h", "chartName": "c", "chartVersion": "1", "releaseName": "A_B"}}, "DNS"),
        ({"helmChart": {"repo": "https://h", "chartName": "c", "chartVersion": "bad"}}, "cannot read version"),
        (
            {"helmChart": {"repo": "https://h", "chartName": "c", "chartVersion": "1", "chartDigest": "md5:x"}},
            "sha256:",
        ),
    ],
)
def test_invalid_specs_name_the_field_never_a_secret(tmp_path: Path, body: object, message: str) -> None:
    with pytest.raises(RenderError, match=message) as err:
        charts.load_spec(_spec(tmp_path, body), "apps/helm-chart.yaml")
    assert "apps/helm-chart.yaml" in str(err.value) and "s3cret" not in str(err.value)


def test_credentials_pick_the_longest_prefix_on_a_path_boundary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHART_PW", "from-env")
    (tmp_path / "pw").write_text("from-file\n")
    creds = tmp_path / "c.json"
    creds.write_text(
        json.dumps(
            {
                "repositories": [
                    {"url": "https://h", "username": "a", "passwordEnv": "CHART_PW"},
                    {"url": "https://h/private", "username": "b", "passwordFile": str(tmp_path / "pw")},
                ]
            }
        )
    )
    entries = charts.load_access(creds)
    assert charts.access_for("https://h/private/x", entries).password == "from-file"
    assert charts.access_for("https://h/privateer", entries).password == "from-env"
    assert charts.access_for("https://h:8443", entries).password is None
    assert "from-file" not in repr(entries)


def test_a_hostile_subchart_archive_inside_a_good_chart_is_refused(tmp_path: Path) -> None:
    """helm loads charts/*.tgz itself: a sub-chart archive with a symlink is found before it does."""
    inner = _tar(
        tmp_path / "sub.tgz",
        [_file("sub/Chart.yaml", CHART_YAML), _special("sub/templates/x.yaml", tarfile.SYMTYPE, "/etc/passwd")],
    )
    outer = _tar(
        tmp_path / "outer.tgz",
        [_file("hello/Chart.yaml", CHART_YAML), _file("hello/charts/sub-0.1.0.tgz", inner.read_bytes())],
    )
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(RenderError, match=r"sub-chart archive charts/sub-0.1.0.tgz: .*holds a link"):
        _chart_archive.unpack(outer, dest, charts.ChartLimits())
    good = _tar(tmp_path / "good-sub.tgz", [_file("sub/Chart.yaml", CHART_YAML)])
    fine = _tar(
        tmp_path / "fine.tgz",
        [_file("hello/Chart.yaml", CHART_YAML), _file("hello/charts/sub-0.1.0.tgz", good.read_bytes())],
    )
    (dest2 := tmp_path / "out2").mkdir()
    assert _chart_archive.unpack(fine, dest2, charts.ChartLimits()) == "hello"


def test_fleet_mode_never_reads_the_operators_chart_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run` without --repo serves many tenants' GitSyncs: $GITOPS_SYNC_CHART_CREDENTIALS is not read for them."""
    from gitops_sync.options import daemon_source_options

    creds = tmp_path / "c.json"
    creds.write_text(json.dumps({"repositories": [{"url": "https://h", "username": "u", "password": "p"}]}))
    monkeypatch.setenv(charts.CREDENTIALS_ENV, str(creds))
    assert [e.url for e in charts.load_access(None)] == ["https://h"]
    assert charts.load_access(None, env=False) == []

    def command(**kw: Any) -> Any:
        return kw["source"].render

    wrapped = daemon_source_options(command)
    given = {"revision": None, "subpath": None, "cache_dir": None, "helm_values": (), "helm_release": None}
    given |= {"namespace": "default", "kustomize_allow_external": False}
    assert wrapped(repo=None, **given).chart_credentials_env is False  # fleet: GitSyncs
    assert wrapped(repo="https://git.example/r.git", **given).chart_credentials_env is True  # one source
