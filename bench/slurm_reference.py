"""The reference's Slurm planner, installed live and fed the same shape as ours (issue 31).

The reference is cheeto 2.6.1 from PyPI. Its planner is ``cheeto.slurm_sync.reconcile
(desired, current) -> list[CommandBatch]``: two ``SlurmSyncState`` (QOS, accounts,
``(user, account, partition) -> qos`` and ``user -> default account``) to one
``sacctmgr`` process per association, QOS, account and default-account change. That
module imports only the standard library, ``sh`` and ``cheeto.utils``, so the wheel is
installed without its dependencies (LDAP, Kerberos and MongoDB bindings it would compile
and never use here) plus ``sh``, with the project's own pip into a directory under the
system's temporary directory, kept there so that a re-run does not install it again.
Nothing goes into ``.venv``.

``to_reference`` turns one of our ``SlurmState`` into the reference's: the same QOS,
accounts, association rows and, for every user, the default account our plan gives them
(the reference plans one ``modify user … defaultaccount=`` per user whose default differs,
which is the ~20k of its ~82k commands from an empty cluster). ``as_read`` makes an
actual state the way a reader would hand it over: every key and name a new string object
(parsed text is never the desired side's objects), equal association states shared
(``slurm_actual`` does that; the reference's parser makes one string per row).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from cheeto_like.sync.slurm.plan import wanted_default_accounts
from cheeto_like.sync.slurm.state import TRES, AssocKey, AssocState, SlurmState

REFERENCE = "cheeto==2.6.1"
REFERENCE_EXTRAS = ("sh>=2.0.7,<3",)  # the one third-party import of cheeto.slurm_sync


def reference_dir() -> Path:
    """Where the reference is kept between runs (``CHEETO_REFERENCE_DIR`` overrides)."""
    chosen = os.environ.get("CHEETO_REFERENCE_DIR")
    if chosen:
        return Path(chosen)
    return Path(tempfile.gettempdir()) / "cheeto-bench-reference" / REFERENCE.replace("==", "-")


def install_reference(progress: Any) -> Path:
    """Install the reference into ``reference_dir()`` unless it is there already; the
    directory appears whole or not at all (installed beside it, then renamed)."""
    target = reference_dir()
    if (target / "cheeto" / "slurm_sync.py").is_file():
        progress(f"reference: {REFERENCE} already in {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix="partial-", dir=target.parent))
    progress(f"reference: installing {REFERENCE} into {target}")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--disable-pip-version-check", "--target", str(partial), REFERENCE,
                    *REFERENCE_EXTRAS], check=True, stdout=sys.stderr)
    partial.rename(target)
    return target


def load_reference(progress: Any) -> ModuleType:
    """``cheeto.slurm_sync`` of the installed reference (its directory goes last on
    ``sys.path``, so it shadows nothing of ours)."""
    where = str(install_reference(progress))
    if where not in sys.path:
        sys.path.append(where)
    module = importlib.import_module("cheeto.slurm_sync")
    version = importlib.import_module("cheeto").__version__
    if f"=={version}" not in REFERENCE:
        raise SystemExit(f"reference: found cheeto {version} in {where}, want {REFERENCE}")
    return module


def _fresh(text: str) -> str:
    """An equal string that is a new object (what parsing a line makes)."""
    return (text + ".")[:-1]


def as_read(state: SlurmState) -> SlurmState:
    """``state`` as a reader would hand it over: new key and name strings, equal
    association states shared, nothing cached."""
    shared: dict[AssocState, AssocState] = {}
    rows = {AssocKey(_fresh(k.user), _fresh(k.account), _fresh(k.partition)):
            shared.setdefault(v, v) for k, v in state.associations.items()}
    return replace(state, associations=rows,
                   default_accounts={_fresh(u): _fresh(a)
                                     for u, a in state.default_accounts.items()},
                   default_rows=frozenset(AssocKey(_fresh(k.user), _fresh(k.account),
                                                   _fresh(k.partition))
                                          for k in state.default_rows),
                   built_pairs=None)


def _tres_limit(ref: ModuleType, value: TRES) -> Any:
    found = dict(value)
    return ref.TRESLimit(cpus=found.get("cpu"), gpus=found.get("gres/gpu"),
                         mem_megs=found.get("mem"))


def to_reference(ref: ModuleType, state: SlurmState, *, read: bool) -> Any:
    """The reference's ``SlurmSyncState`` for ``state`` (see the module docstring);
    ``read``: new string objects everywhere, as its ``sacctmgr`` parser makes them."""
    copy = _fresh if read else str
    defaults = wanted_default_accounts(state, SlurmState(cluster=state.cluster))
    return ref.SlurmSyncState(
        qos={copy(n): ref.QOSState(group=_tres_limit(ref, q.group),
                                   user=_tres_limit(ref, q.user),
                                   job=_tres_limit(ref, q.job), priority=q.priority,
                                   flags=frozenset(q.flags))
             for n, q in state.qos.items()},
        accounts={copy(n): ref.AccountState(
            max_user_jobs=-1 if a.max_user_jobs is None else a.max_user_jobs,
            max_group_jobs=-1 if a.max_group_jobs is None else a.max_group_jobs,
            max_submit_jobs=-1 if a.max_submit_jobs is None else a.max_submit_jobs,
            max_job_length="-1" if a.max_wall_minutes is None else str(a.max_wall_minutes))
            for n, a in state.accounts.items()},
        associations={(copy(k.user), copy(k.account), copy(k.partition)):
                      copy(",".join(sorted(v.qos))) for k, v in state.associations.items()},
        default_accounts={copy(u): copy(a) for u, a in defaults.items()})


def reference_commands(ref: ModuleType, batches: list[Any]) -> int:
    """How many ``sacctmgr`` processes the reference's plan starts."""
    return sum(len(batch.specs) for batch in batches)
