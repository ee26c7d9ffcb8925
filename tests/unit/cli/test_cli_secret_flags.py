"""The SOPS and --verify-commits flags through the real CLI, before anything is fetched: keys read at start
(a missing file is exit 2 naming it), the keys flags without --verify-commits a usage error, and the fleet
(`run` without --repo) refusing them, so a GitSync never decrypts or verifies with the controller's keys."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from gitops_sync.cli import main


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.output


def test_a_missing_key_file_fails_before_the_source_is_read(tmp_path: Path) -> None:
    missing = tmp_path / "none.agekey"
    code, out = run("render", "--repo", str(tmp_path / "no-repo"), "--sops-age-key-file", str(missing))
    assert code == 2 and f"cannot read the age identity file {missing}" in out, out
    code, out = run("render", "--repo", str(tmp_path), env={"SOPS_AGE_KEY_FILE": str(missing)})
    assert code == 2 and str(missing) in out, out
    code, out = run("render", "--repo", str(tmp_path), "--verify-commits", "--allowed-signers", str(missing))
    assert code == 2 and f"cannot read the SSH allowed-signers file {missing}" in out, out


def test_trusted_keys_without_verify_commits_is_a_usage_error(tmp_path: Path) -> None:
    code, out = run("render", "--repo", str(tmp_path), "--allowed-signers", str(tmp_path / "s"))
    assert code == 2 and "are the keys of --verify-commits" in out, out


def test_the_fleet_refuses_the_controllers_keys(tmp_path: Path) -> None:
    key = tmp_path / "k"
    key.write_text("AGE-SECRET-KEY-1X\n")
    for flags in (["--sops-age-key-file", str(key)], ["--verify-commits"]):
        code, out = run("run", *flags)
        assert code == 2 and "apply to a --repo source, not to GitSyncs" in out, out
