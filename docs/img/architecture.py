"""Draw docs/img/architecture.svg: the parts of a cheeto-like deployment.

Plain Python, no dependency. Run `python docs/img/architecture.py` after editing the
boxes or arrows below, and commit both files.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

# name -> (x, y, width, height, fill, lines of text)
BOXES: dict[str, tuple[int, int, int, int, str, list[str]]] = {
    "mongo": (330, 20, 240, 70, "#e8f4e8", ["MongoDB replica set", "the source of truth"]),
    "cli": (20, 20, 220, 70, "#eef", ["cheeto CLI (ng ...)", "operations + History"]),
    "api": (660, 20, 220, 70, "#eef", ["daemon api", "/api/v1 + dashboard"]),
    "people": (660, 130, 220, 50, "#fff", ["browsers, cheeto client,", "puppet (API keys)"]),
    "beat": (20, 160, 220, 60, "#fef6e4", ["daemon beat", "(lease: one sender)"]),
    "broker": (330, 160, 240, 60, "#fde8e8", ["RabbitMQ", "queues cheeto, slurm.<site>"]),
    "hub": (20, 290, 300, 80, "#eef", ["hub worker (daemon worker)", "ldap_sync, puppet_sync,",
                                       "sympa, HiPPO, IAM, reap, mail"]),
    "site": (460, 290, 420, 80, "#eef", ["site worker (daemon worker --site farm)",
                                         "on the head node: slurm_sync, usage_collect,",
                                         "cluster_monitor, the quota agent"]),
    "ldap": (20, 430, 140, 50, "#f4f4f4", ["LDAP directory"]),
    "puppet": (175, 430, 145, 50, "#f4f4f4", ["puppet repo, mail"]),
    "slurmdbd": (460, 430, 130, 50, "#f4f4f4", ["slurmdbd", "(sacctmgr)"]),
    "files": (610, 430, 130, 50, "#f4f4f4", ["quota.db", "reservations.db"]),
    "ctld": (760, 420, 120, 60, "#f4f4f4", ["slurmctld", "job_submit.lua", "reads, reserves"]),
}

# (from, to, label): every arrow points the way data flows
ARROWS: list[tuple[str, str, str]] = [
    ("cli", "mongo", "transactions"),
    ("api", "mongo", "reads, writes"),
    ("people", "api", "HTTPS"),
    ("beat", "broker", "tasks"),
    ("broker", "hub", ""),
    ("broker", "site", ""),
    ("hub", "ldap", "reconcile"),
    ("hub", "puppet", ""),
    ("site", "slurmdbd", "reconcile"),
    ("site", "files", "table"),
    ("ctld", "files", ""),
]


def centre(name: str) -> tuple[float, float]:
    x, y, w, h, _, _ = BOXES[name]
    return x + w / 2, y + h / 2


def edge_point(name: str, towards: tuple[float, float]) -> tuple[float, float]:
    """Where the line from the box's centre to `towards` leaves the box."""
    _, _, w, h, _, _ = BOXES[name]
    cx, cy = centre(name)
    dx, dy = towards[0] - cx, towards[1] - cy
    if dx == 0 and dy == 0:
        return cx, cy
    scale = min(w / 2 / abs(dx) if dx else float("inf"), h / 2 / abs(dy) if dy else float("inf"))
    return cx + dx * scale, cy + dy * scale


def render() -> str:
    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="900" height="560" '
        'viewBox="0 0 900 560" font-family="sans-serif" font-size="13">',
        "<title>cheeto-like architecture</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#444"/></marker></defs>',
        '<rect width="900" height="560" fill="white"/>',
        '<rect x="450" y="275" width="440" height="215" fill="none" stroke="#999" '
        'stroke-dasharray="6 4"/>',
        '<text x="455" y="505" fill="#666">the site\'s head node</text>',
        # the store is read by the workers too
        '<text x="20" y="540" fill="#666">Workers and beat read and write MongoDB as well '
        '(leases, SyncRuns, usage); arrows show the main flow only.</text>',
    ]
    labels = []
    for src, dst, label in ARROWS:
        a = edge_point(src, centre(dst))
        b = edge_point(dst, centre(src))
        out.append(f'<line x1="{a[0]:.0f}" y1="{a[1]:.0f}" x2="{b[0]:.0f}" y2="{b[1]:.0f}" '
                   'stroke="#444" stroke-width="1.5" marker-end="url(#arrow)"/>')
        if label:
            mx, my = (a[0] + b[0]) / 2, (a[1] + b[1]) / 2
            anchor = "middle" if abs(a[1] - b[1]) < 1 else "start"
            dx = 0 if anchor == "middle" else 6
            labels.append(f'<text x="{mx + dx:.0f}" y="{my - 5:.0f}" font-size="11" '
                          f'text-anchor="{anchor}" fill="#333">{escape(label)}</text>')
    for x, y, w, h, fill, lines in BOXES.values():
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{fill}" '
                   'stroke="#333"/>')
        top = y + h / 2 - (len(lines) - 1) * 8 + 4
        for i, line in enumerate(lines):
            weight = ' font-weight="bold"' if i == 0 else ""
            out.append(f'<text x="{x + w / 2:.0f}" y="{top + i * 16:.0f}" '
                       f'text-anchor="middle"{weight}>{escape(line)}</text>')
    out.extend(labels)
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    target = Path(__file__).with_name("architecture.svg")
    target.write_text(render())
    print(target)
