"""Built-in commands that need neither the config nor the store: ``cheeto help`` and
``cheeto completion``. They read only the static command table, so they are instant."""

from __future__ import annotations

import argparse

from .app import command
from .registry import NODES

_WIDTH = 44


@command("help", help="print the whole command tree with one line of help each", config=False)
def help_tree(args: argparse.Namespace) -> None:
    out = args._cheeto_stdout
    out.write("cheeto: the source of truth for HPC accounts and resources.\n"
              "Every command takes --help for its options.\n\n")
    width = min(_WIDTH, max(len(n.path) for n in NODES) + 2)
    for node in NODES:
        label = node.path + (f" ({', '.join(node.aliases)})" if node.aliases else "")
        out.write(f"{label:<{width}} {node.help}\n" if len(label) < width
                  else f"{label}\n{'':<{width}} {node.help}\n")


@command("completion", help="print a shell completion script (bash or zsh)", config=False)
def completion(args: argparse.Namespace) -> None:
    from .complete import script

    args._cheeto_stdout.write(script(args.shell))


@completion.args()
def _(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=["bash", "zsh"],
                        help="the shell to complete for; load it with "
                             "`eval \"$(cheeto completion bash)\"` in ~/.bashrc "
                             "(zsh: in ~/.zshrc)")
