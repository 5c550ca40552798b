"""Versions and version ranges, PEP 440 through ``packaging``, for both sides of a cell.

In-cell module: it imports the standard library and ``packaging`` only (a dependency of
pytest, so every cell environment has it), and serves the in-cell known-issue plugin
(:mod:`accelgrid.testing.known_issues_runtime`) as well as the dev side (registry validation,
:mod:`accelgrid.config.compat`, sorting in grids and op tables).

A range is a PEP 440 specifier set: comma-separated clauses ``OP VERSION`` with OP one of
``==``, ``!=``, ``>=``, ``<=``, ``>``, ``<``, and ``==X.*`` / ``!=X.*`` for a whole series
(``"<2.5"``, ``">=2.4,<2.6"``, ``"==2.5.*"``). ``~=`` and ``===`` are not taken, and
neither are local labels (``+xpu``) in a range. Comparisons follow PEP 440, with
pre-releases included (``SpecifierSet(..., prereleases=True)``):

* local version labels are dropped before comparing: ``2.5.1+xpu`` is 2.5.1, in
  ``"==2.5.1"`` and outside ``"<2.5"``;
* a pre-release or nightly sorts below its release: ``2.6.0.dev20241001`` is in
  ``">=2.5,<2.7"``, ``"==2.6.*"`` and ``">=2.6.0.dev0"``, but in neither ``">=2.6"`` nor
  ``"<2.6"`` (PEP 440: ``<V`` admits no pre-release of V itself);
* missing release parts count as 0: ``2.5`` is ``2.5.0``.

:func:`range_is_empty` tries the range on probe versions generated from its bounds: the
bounds, their neighbours and a version inside each stretch between them (:func:`_probes`
says how, and what it misses).
"""

from __future__ import annotations

import functools

from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

OPERATORS = ("==", "!=", ">=", "<=", ">", "<")
_ZERO = Version("0")


def public_version(text: str) -> Version:
    """``"2.5.1+xpu"`` -> ``Version("2.5.1")``: the version without its local label.
    Raises ValueError (InvalidVersion) for text that is no PEP 440 version."""
    return Version(Version(str(text)).public)


def version_key(text: str | None) -> Version:
    """A sort key for versions read from results: :func:`public_version`, or 0 for a
    missing or unparseable one (sorted first)."""
    try:
        return public_version(text) if text else _ZERO
    except InvalidVersion:
        return _ZERO


def _clause(part: str) -> Specifier:
    text = part.strip()
    if text.startswith("~="):
        raise ValueError(f"'{text}': '~=' is not taken here; spell the bounds out "
                         f"(e.g. '>=2.5,==2.*' for '~=2.5'; operators: {', '.join(OPERATORS)})")
    if text.startswith("==="):
        raise ValueError(f"'{text}': '===' compares text, not versions; use == "
                         f"(operators: {', '.join(OPERATORS)})")
    try:
        spec = Specifier(text)
    except InvalidSpecifier:
        op = next((o for o in OPERATORS if text.startswith(o)), None)
        if op not in (None, "==", "!=") and text.endswith(".*"):
            raise ValueError(f"'{text}': '.*' only goes with == or !=") from None
        raise ValueError(f"'{text}' is not a clause like '>=2.4' or '<2.5' "
                         f"(operators: {', '.join(OPERATORS)})") from None
    if "+" in spec.version:
        raise ValueError(f"'{text}': no local version label (+...) in a range; versions "
                         "are compared without theirs (2.5.1+xpu is 2.5.1)")
    return spec


@functools.lru_cache(maxsize=4096)
def parse_range(text: str) -> SpecifierSet:
    """``">=2.4,<2.5"`` -> its SpecifierSet (pre-releases included). The same text gives the
    same (shared: not to be changed) object: a matrix load asks the compatibility rules'
    ranges for every cell (600 times, a third of its time).

    Raises ValueError saying why for an empty text, an empty clause (``">=2.4,"``), an
    operator or version that is not PEP 440, ``~=``/``===``, or a local label.
    """
    text = str(text)
    if not text.strip():
        raise ValueError("empty range")
    clauses = [str(_clause(part)) for part in text.split(",")]
    return SpecifierSet(",".join(clauses), prereleases=True)


def in_range(version: str, text: str | None) -> bool:
    """Whether ``version`` (e.g. ``"2.5.1+xpu"``, compared as 2.5.1) lies in range ``text``
    (None: any version). ValueError for a bad range or version."""
    if text is None:
        return True
    return parse_range(text).contains(public_version(version))


def _version(release: tuple[int, ...], suffix: str = "", epoch: int = 0) -> Version:
    return Version(f"{epoch}!" * bool(epoch) + ".".join(map(str, release)) + suffix)


def _neighbours(v: Version) -> set[Version]:
    """Builds next to ``v`` at its own release: its first dev build (``2.6rc2.dev0``), and
    its next dev, pre and post builds."""
    pre = f"{v.pre[0]}{v.pre[1]}" if v.pre else ""
    post = f".post{v.post}" if v.post is not None else ""
    out = {_version(v.release, f"{pre}.post{(v.post or 0) + 1}", v.epoch)}
    if v.dev is None:
        out.add(_version(v.release, f"{pre}{post}.dev0", v.epoch))
    else:
        out.add(_version(v.release, f"{pre}{post}.dev{v.dev + 1}", v.epoch))
    if v.pre:
        out.add(_version(v.release, f"{v.pre[0]}{v.pre[1] + 1}", v.epoch))
    return out


def _probes(bounds: set[Version]) -> set[Version]:
    """Versions standing for every stretch that the bounds cut the version line into.

    The bounds are taken with the next release at their last place (``2.5`` -> ``2.6``,
    ``2.5.1`` -> ``2.5.2``: where a ``==2.5.*`` series ends). For each: itself, its final
    release, its release's ``.dev0`` (below all of its pre-releases) and ``.post1``, and the
    builds next to it (:func:`_neighbours`); between each pair of neighbouring bounds with
    different releases, the lower release extended by ``…0.1`` past the longer one (``2.5``
    and ``2.5.1`` -> ``2.5.0.1``: a final release, so neither a pre-release of the upper
    bound nor a post-release of the lower); plus 0 and a version above every bound.

    A heuristic, checked against brute force on random ranges (tests/base/test_versions.py):
    it could only miss a range whose sole versions are builds of one release several
    dev/pre/post steps away from all of its bounds, which a registry has no use for.
    """
    bounds = bounds | {_version((*b.release[:-1], b.release[-1] + 1), epoch=b.epoch)
                       for b in bounds}
    probes = {_ZERO}
    for b in bounds:
        probes |= {b, _version(b.release, epoch=b.epoch), _version(b.release, ".dev0", b.epoch),
                   _version(b.release, ".post1", b.epoch), *_neighbours(b)}
    ordered = sorted(bounds)
    for low, high in zip(ordered, ordered[1:], strict=False):
        width = max(len(low.release), len(high.release))
        padded = low.release + (0,) * (width - len(low.release))
        probes.add(_version((*padded, 1), epoch=low.epoch))
    top = max(bounds, default=_ZERO)
    probes.add(_version((top.release[0] + 1,), epoch=top.epoch))
    return probes


def range_is_empty(text: str) -> bool:
    """Whether no version can satisfy ``text`` (e.g. ``">=2.6,<2.5"``), tried on the probe
    versions of :func:`_probes`. ValueError for a bad range."""
    spec = parse_range(text)
    bounds = {Version(s.version.removesuffix(".*")) for s in spec}
    return not any(spec.contains(v) for v in _probes(bounds))


def installed_version(name: str) -> str | None:
    """The version of the installed distribution ``name`` (None: not installed), as
    :func:`importlib.metadata.version` says it, from the metadata's header lines only.
    importlib parses the whole METADATA with the email package: torch's and
    transformers' run to thousands of lines, and env.json's 35 packages took 0.3 s of
    every run's start that way."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    for line in text.splitlines():
        if not line.strip():
            break   # the headers end here; the description follows
        key, sep, value = line.partition(":")
        if sep and key.lower() == "version":
            return value.lstrip(" \t")   # as the email parser leaves a header's value
    return dist.version   # no plain Version header: importlib's own parse decides
