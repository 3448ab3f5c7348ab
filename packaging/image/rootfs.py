"""Turns an `mmdebstrap --variant=extract` tree into the release image's distroless root.

The extract variant unpacks packages without running their scripts, so it works for a foreign
architecture without emulation, but apt also brings what the packages' dependency alternatives
name first (dpkg and tar, for readline-common). This keeps only the dependency closure of the
wanted packages, deletes the files of every other package (no package manager, no shell, no
tar), records the kept ones as `/var/lib/dpkg/status.d/<package>` (the distroless layout that
SBOM scanners read), and removes apt's state, manuals and translations.

    rootfs.py ROOT RECORD PACKAGE...   (the .debs are still in ROOT/var/cache/apt/archives)

RECORD gets one line per kept package, `name version architecture sha256-of-the-.deb`, for
the release's provenance.

A dependency on a package in NEVER is left unmet: readline-common names dpkg for install-info
and base-files pre-depends on awk, both for their install scripts, which never run here.
"""

from __future__ import annotations

import hashlib
import io
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile

DROPPED_DIRS = ("usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian", "usr/share/bug")
NEVER = ("dpkg", "tar", "bash", "dash", "coreutils", "perl-base", "apt", "debconf", "mawk")
MADE_BY_MMDEBSTRAP = ("etc/hostname", "etc/resolv.conf", "etc/fstab")
STATE_DIRS = (
    "dev",
    "proc",
    "sys",
    "run",
    "var/cache/apt",
    "var/lib/apt",
    "etc/apt",
    "var/log",
    "var/lib/dpkg",
    "var/cache/debconf",
)


def control(deb: pathlib.Path) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True).stdout


def field(text: str, name: str) -> str:
    match = re.search(rf"^{name}: (.*(?:\n .*)*)", text, re.MULTILINE)
    return match.group(1) if match else ""


def dependencies(text: str) -> list[list[str]]:
    """Depends and Pre-Depends as alternatives of package names (versions and arch dropped)."""
    groups = []
    for name in ("Pre-Depends", "Depends"):
        for group in filter(None, (g.strip() for g in field(text, name).split(","))):
            groups.append([re.split(r"[ (:]", alt.strip())[0] for alt in group.split("|")])
    return groups


def closure(wanted: list[str], controls: dict[str, str]) -> set[str]:
    """The wanted packages and, for each dependency, its first alternative that is wanted or
    present (virtual names resolved through Provides)."""
    provides = {}
    for name, text in controls.items():
        for provided in filter(None, (p.strip().split(" ")[0] for p in field(text, "Provides").split(","))):
            provides.setdefault(provided, name)
    kept: set[str] = set()
    todo = list(wanted)
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        if name not in controls:
            raise SystemExit(f"rootfs: {name} was wanted but apt did not download it")
        kept.add(name)
        for group in dependencies(controls[name]):
            resolved = [alt if alt in controls else provides.get(alt, alt) for alt in group]
            present = [alt for alt in resolved if alt in controls and alt not in NEVER]
            if not present and any(alt in NEVER for alt in resolved):
                continue
            chosen = next((alt for alt in present if alt in kept), None) or next(filter(None, present), None)
            if chosen is None:
                raise SystemExit(f"rootfs: {name} needs {' | '.join(group)}, which apt did not download")
            todo.append(chosen)
    return kept


def members(deb: pathlib.Path) -> list[str]:
    tar_stream = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar_stream)) as archive:
        return [m.name.removeprefix("./") for m in archive.getmembers() if not m.isdir()]


def main(root: pathlib.Path, record: pathlib.Path, wanted: list[str]) -> None:
    debs = {}
    controls = {}
    for deb in sorted((root / "var/cache/apt/archives").glob("*.deb")):
        text = control(deb)
        name = field(text, "Package")
        debs[name], controls[name] = deb, text
    kept = closure(wanted, controls)
    for name in sorted(set(debs) - kept):
        for member in members(debs[name]):
            path = root / member
            if path.is_symlink() or path.is_file():
                path.unlink()
        shutil.rmtree(root / "usr/share/doc" / name, ignore_errors=True)
    status = {name: controls[name] for name in sorted(kept)}
    record.write_text(
        "".join(
            f"{name} {field(text, 'Version')} {field(text, 'Architecture')} "
            f"{hashlib.sha256(debs[name].read_bytes()).hexdigest()}\n"
            for name, text in status.items()
        )
    )
    for relative in STATE_DIRS + DROPPED_DIRS:
        shutil.rmtree(root / relative, ignore_errors=True)
    for relative in MADE_BY_MMDEBSTRAP:
        (root / relative).unlink(missing_ok=True)
    for doc in (root / "usr/share/doc").glob("*/*"):
        if doc.name != "copyright":
            shutil.rmtree(doc) if doc.is_dir() and not doc.is_symlink() else doc.unlink()
    status_dir = root / "var/lib/dpkg/status.d"
    status_dir.mkdir(parents=True)
    for name, text in status.items():
        (status_dir / name).write_text(text)
    # Directories left empty by the deleted packages go too (the image keeps /tmp and /var/lib/dpkg).
    for directory in sorted((p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()), reverse=True):
        if not any(directory.iterdir()) and directory.relative_to(root).as_posix() not in ("tmp", "var/tmp"):
            directory.rmdir()


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3:])
