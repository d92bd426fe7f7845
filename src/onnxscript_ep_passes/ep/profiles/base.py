"""What an EP profile is, and the registry that turns a user's EP name into one.

Rules:

1. An EP is a value, an :class:`EpProfile`: ORT's provider name, the aliases users may
   type, a display name, its memory traits, its cost rates, how to select it in a session
   and how to list its kernels live. Code that needs any of these asks the profile; nothing
   outside :mod:`onnxscript_ep_passes.ep.profiles` spells an EP's name or branches on it.
2. Each EP's profile is one module of this package, registered with :func:`register` when
   the package is imported; ORT names and aliases are unique across profiles.
3. :func:`resolve_ep` reads what a user typed: ORT's name or an alias, case-insensitively;
   any other ``<Name>ExecutionProvider`` gets a generic profile (no traits, default
   rates; it needs ``--kernel-table`` or ``--measure``). Anything else is a
   :class:`ValueError` listing the accepted names.
4. :func:`profile_for` is the lenient lookup used on names that are already ORT's (a
   kernel table's EP): a registered profile, else a generic one for that name.
"""

from __future__ import annotations

__all__ = [
    "CPU_ORT_NAME",
    "DISCRETE_GPU_RATES",
    "CostRates",
    "EpProfile",
    "canonical_ep_name",
    "generic_profile",
    "profile_for",
    "register",
    "registered_profiles",
    "resolve_ep",
    "select_builtin_or_plugin",
    "traits_for",
]

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from onnxscript_ep_passes.ep.kernel_listing import LiveTableUnavailableError, list_builtin_kernels
from onnxscript_ep_passes.ep.kernel_table import KernelTable
from onnxscript_ep_passes.ep.traits import EpTraits

logger = logging.getLogger(__name__)

CPU_ORT_NAME = "CPUExecutionProvider"
"""The provider every session falls back to (the CPU profile's name)."""


@dataclasses.dataclass(frozen=True)
class CostRates:
    """The rates the cost objective prices an EP with (:mod:`~onnxscript_ep_passes.ep.cost`).

    Attributes:
        memcpy_latency_us: fixed cost of one Memcpy node (a sync and a launch).
        link_bytes_per_us: host <-> device bandwidth.
        ep_flops_per_us: the EP's compute rate.
        ep_bytes_per_us: the EP's memory bandwidth.
        basis: what the figures stand for.
    """

    memcpy_latency_us: float
    link_bytes_per_us: float
    ep_flops_per_us: float
    ep_bytes_per_us: float
    basis: str


DISCRETE_GPU_RATES = CostRates(
    memcpy_latency_us=10.0,
    link_bytes_per_us=10_000.0,
    ep_flops_per_us=5_000_000.0,
    ep_bytes_per_us=300_000.0,
    basis="a discrete GPU behind PCIe (orders of magnitude, not a device's datasheet)",
)
"""The default rates: a discrete GPU behind PCIe (benchmarks/calibrate_cost.py)."""

SessionSelector = Callable[[Any, Mapping[str, str]], "list[Any] | None"]
"""``(session_options, provider_options) -> providers``: selects the EP in new sessions."""


def select_builtin_or_plugin(ort_name: str) -> SessionSelector:
    """Select ``ort_name`` as a provider compiled into ORT, else through the devices of a
    plugin EP registered under that name (the CUDA plugin some onnxruntime-gpu builds
    bundle)."""

    def select(so: Any, provider_options: Mapping[str, str]) -> list[Any] | None:
        import onnxruntime as ort

        if ort_name in ort.get_available_providers():
            return [(ort_name, dict(provider_options)), CPU_ORT_NAME]
        devices = [d for d in ort.get_ep_devices() if d.ep_name == ort_name]
        if devices:
            so.add_provider_for_devices(devices, dict(provider_options))
            return None
        raise RuntimeError(
            f"{ort_name} is not available in onnxruntime {ort.__version__} "
            f"(available: {ort.get_available_providers()}; no plugin EP devices for it)"
        )

    return select


@dataclasses.dataclass(frozen=True)
class EpProfile:
    """Everything this package knows about one EP (module docstring, rule 1).

    Attributes:
        ort_name: ORT's provider name (``"CUDAExecutionProvider"``).
        display_name: how reports name it (``"CUDA"``).
        aliases: other accepted spellings, lower case (``("cuda",)``).
        traits: which tensors its kernels keep in CPU memory, and its CPU preference.
        cost: the rates the cost objective prices it with.
        select_session: selects it in new session options (see :data:`SessionSelector`).
        list_kernels: lists its kernels from the installed ORT (raises
            :class:`~onnxscript_ep_passes.ep.kernel_listing.LiveTableUnavailableError`).
        check_available: says whether ORT can make a session on it here, and if not,
            why, never raising (default: select it in new session options).
        is_host: the CPU EP itself: nothing to place, nothing to lower for.
        generic: a profile made for an EP this package has no data on (rule 3).
        breaks_builtin_listing: where ORT has this provider, ``get_all_opkernel_def()``
            kills the process (a segmentation fault, no exception to catch), so no
            provider's kernels are listed that way in that ORT (:meth:`live_table`).
    """

    ort_name: str
    display_name: str
    aliases: tuple[str, ...]
    traits: EpTraits
    cost: CostRates = DISCRETE_GPU_RATES
    select_session: SessionSelector | None = dataclasses.field(default=None, compare=False)
    list_kernels: Callable[[], KernelTable] | None = dataclasses.field(default=None, compare=False)
    check_available: Callable[[], tuple[bool, str]] | None = dataclasses.field(
        default=None, compare=False
    )
    is_host: bool = False
    generic: bool = False
    breaks_builtin_listing: bool = False

    @property
    def short_name(self) -> str:
        """Its first alias (``"cuda"``), as snapshot files are named; else ORT's name."""
        return self.aliases[0] if self.aliases else self.ort_name

    def session_providers(self, so: Any, provider_options: Mapping[str, str]) -> list[Any] | None:
        """Select this EP in ``so``; return the ``providers`` argument (None for devices)."""
        select = self.select_session or select_builtin_or_plugin(self.ort_name)
        return select(so, provider_options)

    def loadable(self) -> tuple[bool, str]:
        """Whether ORT can make a session on this EP here, and if not, why (never raises)."""
        if self.check_available is not None:
            return self.check_available()
        try:
            import onnxruntime as ort

            self.session_providers(ort.SessionOptions(), {})
        except (RuntimeError, ImportError, ValueError) as error:
            return False, str(error)
        return True, ""

    def live_table(self) -> KernelTable:
        """This EP's kernels listed from the installed ORT (not cached here).

        Raises:
            LiveTableUnavailableError: they cannot be listed here, or the installed ORT
                has a provider whose profile says listing would crash the process.
        """
        if self.list_kernels is not None:
            return self.list_kernels()
        blocker = _listing_blocker()
        if blocker is not None:
            raise LiveTableUnavailableError(
                f"not listing {self.ort_name}: get_all_opkernel_def() crashes an "
                f"onnxruntime that has {blocker.ort_name}"
            )
        return list_builtin_kernels(self.ort_name)


def _listing_blocker() -> EpProfile | None:
    """A registered profile that breaks ``get_all_opkernel_def()`` and that the installed
    ORT has, if any."""
    breaking = [p for p in _BY_NAME.values() if p.breaks_builtin_listing]
    if not breaking:
        return None
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    available = set(ort.get_available_providers())
    return next((p for p in breaking if p.ort_name in available), None)


_BY_NAME: dict[str, EpProfile] = {}
_BY_ALIAS: dict[str, EpProfile] = {}


def register(profile: EpProfile) -> EpProfile:
    """Add ``profile`` to the registry (rule 2); returns it, for a module constant.

    Raises:
        ValueError: its ORT name or one of its aliases is taken.
    """
    keys = {profile.ort_name.lower(), *profile.aliases}
    taken = sorted(k for k in keys if k in _BY_ALIAS)
    if taken:
        raise ValueError(f"EP names already registered: {taken}")
    _BY_NAME[profile.ort_name] = profile
    for key in keys:
        _BY_ALIAS[key] = profile
    return profile


def registered_profiles() -> tuple[EpProfile, ...]:
    """Every registered profile, in registration order."""
    return tuple(_BY_NAME.values())


@functools.cache
def generic_profile(ort_name: str) -> EpProfile:
    """A profile for an EP without one (rule 3): no traits, the default rates."""
    logger.debug("%s has no profile here: no memory traits, default cost rates", ort_name)
    return EpProfile(
        ort_name=ort_name,
        display_name=ort_name.removesuffix("ExecutionProvider") or ort_name,
        aliases=(),
        traits=EpTraits(
            ep=ort_name, cpu_inputs={}, cpu_outputs={}, evidence="no data: generic profile"
        ),
        generic=True,
    )


def resolve_ep(ep: str | EpProfile) -> EpProfile:
    """The profile of the EP a user named (rule 3).

    Raises:
        ValueError: ``ep`` is neither a known name or alias nor ``<Name>ExecutionProvider``.
    """
    if isinstance(ep, EpProfile):
        return ep
    key = ep.strip().lower()
    if key in _BY_ALIAS:
        return _BY_ALIAS[key]
    if key.endswith("executionprovider") and key.isalnum():
        return generic_profile(ep.strip())
    names = sorted({p.ort_name for p in _BY_NAME.values()})
    aliases = sorted(k for k in _BY_ALIAS if k.isalpha() and len(k) < 10)
    raise ValueError(
        f"Unknown execution provider {ep!r}; expected ORT's name of an EP (like {names}) "
        f"or an alias {aliases}"
    )


def profile_for(ep: str | EpProfile) -> EpProfile:
    """The profile of ``ep``, any name accepted (rule 4)."""
    try:
        return resolve_ep(ep)
    except ValueError:
        return generic_profile(str(ep))


def canonical_ep_name(ep: str | EpProfile) -> str:
    """ORT's provider name for what a user typed ("webgpu", "cuda", "dml", "cpu" ...).

    Raises:
        ValueError: as :func:`resolve_ep`.
    """
    return resolve_ep(ep).ort_name


def traits_for(ep: str | EpProfile) -> EpTraits:
    """The memory traits of ``ep``'s profile (an EP without a profile has none)."""
    return profile_for(ep).traits
