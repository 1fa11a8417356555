"""The ``RDMASPAWN`` environment variable: what it may say, parsed and written in one place.

A comma-separated list of items; every Python process that starts with it set
(and has this rdmaspawn installed) applies them at start-up, through the
``rdmaspawn-autostart.pth`` hook (:mod:`rdmaspawn._startup.autostart`).
``rdmaspawn run`` writes it for the command it starts.

==========================  =====================================================
item                        effect at interpreter start
==========================  =====================================================
``patch``                   ``rdmaspawn.patch()``
``guard=raise``             ``rdmaspawn.guard("raise")`` (``guard`` alone: ``"warn"``)
``repair``                  ``rdmaspawn.repair_fork()``: where the kernel reports
                            copy-on-fork, libibverbs' marks are kept out of
                            every fork(); elsewhere nothing
``start_method=forkserver`` multiprocessing's default start method becomes
                            forkserver (or ``spawn``) unless the program picks one
                            (``forkserver``: a no-op on 3.14+, already the default);
                            with ``repair`` in force, left alone: ``fork`` stays
                            safe there
``verbose``                 one line on stderr saying what was done
``on`` (or ``1``)           ``patch,guard=raise,repair,start_method=forkserver``
``off`` (or ``0``, empty)   nothing
==========================  =====================================================

Unknown items and bad values are reported (one line each) and skipped; the
valid items still apply.
"""
# No `from __future__ import annotations`: it is an import of __future__ in every
# interpreter RDMASPAWN starts; annotations 3.9 cannot evaluate are quoted.
__all__ = ["VARIABLE", "GUARD_ACTIONS", "START_METHODS", "Settings", "parse", "ON"]

#: The environment variable the start-up hook reads.
VARIABLE = "RDMASPAWN"
#: What ``guard=`` accepts (``rdmaspawn.guard()``'s actions).
GUARD_ACTIONS = ("warn", "raise")
#: What ``start_method=`` accepts: the start methods that do not fork the caller.
START_METHODS = ("forkserver", "spawn")

_ON = ("on", "1")
_OFF = ("off", "0")
_ITEMS_HELP = ("patch, guard=warn|raise, repair, start_method=forkserver|spawn, verbose, on, "
               "off")


class Settings(tuple):  # type: ignore[type-arg]
    """What one ``RDMASPAWN`` value asks for: a tuple of its five fields. By
    hand: a NamedTuple would import typing in every interpreter it starts."""

    __slots__ = ()
    _fields = ("patch", "guard", "start_method", "verbose", "repair")

    def __new__(cls, patch: bool = False, guard: "str | None" = None,
                start_method: "str | None" = None, verbose: bool = False,
                repair: bool = False) -> "Settings":
        return tuple.__new__(cls, (patch, guard, start_method, verbose, repair))

    @property
    def patch(self) -> bool:
        """``rdmaspawn.patch()``."""
        return bool(self[0])

    @property
    def guard(self) -> "str | None":
        """``"warn"``, ``"raise"`` or ``None`` (no guard)."""
        value: "str | None" = self[1]  # noqa: UP037  # mypy 3.9: no X | Y unquoted without __future__
        return value

    @property
    def start_method(self) -> "str | None":
        """``"forkserver"``, ``"spawn"`` or ``None`` (leave multiprocessing's default)."""
        value: "str | None" = self[2]  # noqa: UP037
        return value

    @property
    def verbose(self) -> bool:
        return bool(self[3])

    @property
    def repair(self) -> bool:
        """``rdmaspawn.repair_fork()``; where it is in force, ``start_method`` is not applied."""
        return bool(self[4])

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self))
        return f"Settings({fields})"

    def __getnewargs__(self) -> "tuple[object, ...]":  # copy and pickle: __new__ takes the fields
        return tuple(self)

    def _asdict(self) -> dict[str, object]:
        return dict(zip(self._fields, self))

    def __bool__(self) -> bool:
        return (self.patch or self.guard is not None or self.start_method is not None
                or self.repair)

    def to_env(self) -> str:
        """The ``RDMASPAWN`` value that asks for exactly this (``"off"`` for nothing)."""
        items = ["patch"] if self.patch else []
        if self.guard is not None:
            items.append(f"guard={self.guard}")
        if self.repair:
            items.append("repair")
        if self.start_method is not None:
            items.append(f"start_method={self.start_method}")
        if self.verbose:
            items.append("verbose")
        return ",".join(items) or "off"


#: What ``on`` stands for, and what ``rdmaspawn run`` asks for by default.
ON = Settings(patch=True, guard="raise", start_method="forkserver", repair=True)


def parse(value: str) -> "tuple[Settings, list[str]]":
    """``(settings, problems)`` for one value; each problem is one line for the user."""
    found = Settings()._asdict()
    problems: list[str] = []
    for raw in value.split(","):
        item = raw.strip()
        key, sep, arg = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        arg = arg.strip().lower()
        if not item or (key in _OFF and not sep):
            continue
        if key in _ON and not sep:
            found.update(patch=True, guard=ON.guard, start_method=ON.start_method, repair=True)
        elif key in ("patch", "verbose", "repair") and not sep:
            found[key] = True
        elif key == "guard" and (not sep or arg in GUARD_ACTIONS):
            found["guard"] = arg if sep else "warn"
        elif key == "start_method" and arg in START_METHODS:
            found["start_method"] = arg
        else:
            problems.append(f"ignoring {item!r} in {VARIABLE}={value!r} (items: {_ITEMS_HELP})")
    return Settings(**found), problems  # type: ignore[arg-type]
