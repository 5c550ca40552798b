"""Version pairings known not to work, checked when the matrix is validated.

Sources: torchao's release notes (it declares no torch requirement), transformers' and
accelerate's own torch requirements. Each rule names the package, the versions it
covers, and the torch range (and device, if any) that it needs. Pairings are about
releases, so a version counts as its release here (``packaging``'s ``base_version``):
local labels, pre-, dev and post parts are dropped (``2.5.1+xpu`` is 2.5.1, a
``2.11.0.dev…`` nightly is 2.11.0), unlike in known-issue ranges, which follow PEP 440
(:mod:`accelgrid.base.versions`).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from ..base.versions import in_range


def _in(version: str, low: str | None, high: str | None) -> bool:
    """Whether ``version``'s release lies in ``[low, high)`` (None: unbounded)."""
    version = Version(version).base_version
    clauses = []
    if low is not None:
        clauses.append(f">={low}")
    if high is not None:
        clauses.append(f"<{high}")
    return in_range(version, ",".join(clauses) or None)


@dataclass(frozen=True)
class Rule:
    package: str
    pkg_from: str | None      # package versions covered: [pkg_from, pkg_below)
    pkg_below: str | None
    torch_from: str | None    # torch versions that work: [torch_from, torch_below)
    torch_below: str | None
    why: str
    device: str | None = None

    def violated(self, package_version: str, torch_version: str, device: str | None) -> bool:
        if self.device is not None and device != self.device:
            return False
        if not _in(package_version, self.pkg_from, self.pkg_below):
            return False
        return not _in(torch_version, self.torch_from, self.torch_below)


RULES: tuple[Rule, ...] = (
    Rule("transformers", "5", None, "2.6", None, "transformers 5.x needs torch >= 2.6"),
    Rule("transformers", None, "4.42", None, None,
         "transformers < 4.42 has no stock-torch XPU support", device="xpu"),
    Rule("accelerate", "1.13", None, "2.7", None,
         "accelerate >= 1.13 needs torch >= 2.7 for XPU", device="xpu"),
    Rule("accelerate", None, "0.32", None, None,
         "accelerate < 0.32 has no stock-torch XPU support", device="xpu"),
    Rule("torchao", "0.7", "0.9", "2.3", "2.6", "torchao 0.7/0.8 pair with torch 2.3–2.5.1"),
    Rule("torchao", "0.11", "0.12", "2.5.1", "2.8", "torchao 0.11 pairs with torch 2.5.1–2.7"),
    Rule("torchao", "0.12", "0.13", "2.5", "2.8", "torchao 0.12 pairs with torch 2.5–2.7.1"),
    Rule("torchao", "0.13", "0.14", "2.6", "2.9", "torchao 0.13 pairs with torch 2.6–2.8"),
    Rule("torchao", "0.14", "0.15", "2.7.1", "2.10", "torchao 0.14.1 pairs with torch 2.7.1–2.9"),
    Rule("torchao", "0.15", "0.16", "2.8", "2.10", "torchao 0.15 pairs with torch 2.8–2.9.1"),
    Rule("torchao", "0.16", "0.17", "2.8", "2.11", "torchao 0.16 pairs with torch 2.8–2.10"),
    Rule("torchao", "0.17", None, "2.11", None, "torchao >= 0.17 needs torch >= 2.11"),
)


def incompatibilities(pins: dict[str, str], device: str | None = None) -> list[str]:
    """Why the pins (``{"torch": "2.4.1", "transformers": "5.0.0", ...}``) cannot work."""
    torch_version = pins.get("torch")
    if not torch_version:
        return []
    out = []
    for rule in RULES:
        version = pins.get(rule.package)
        if version and rule.violated(version, torch_version, device):
            out.append(f"{rule.package} {version} with torch {torch_version}: {rule.why}")
    return out
