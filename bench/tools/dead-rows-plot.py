#!/usr/bin/env python3
# Reads the Markdown table bench/tools/dead-rows-drain prints (stdin) and
# writes an SVG: deliveries/s by dead rows, one line per completion.
import sys
rows = []
for line in sys.stdin:
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 5 and cells[0].isdigit():
        rows.append((cells[1], int(cells[2]), float(cells[3]), float(cells[4])))
W, H, L, R, T, B = 720, 420, 80, 160, 40, 60
xmax = max(r[1] for r in rows) * 1.05 or 1
ymax = max(r[2] for r in rows) * 1.1
def x(v): return L + (W - L - R) * v / xmax
def y(v): return H - B - (H - T - B) * v / ymax
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{L}" y="24" font-size="14">Outbox drain with dead rows and stale statistics (autovacuum off)</text>']
for i in range(6):
    v = ymax * i / 5
    out.append(f'<line x1="{L}" x2="{W-R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
    out.append(f'<text x="{L-8}" y="{y(v)+4:.1f}" text-anchor="end">{v/1000:.0f}k</text>')
for i in range(6):
    v = xmax * i / 5
    out.append(f'<text x="{x(v):.1f}" y="{H-B+18}" text-anchor="middle">{v/1000:.0f}k</text>')
out.append(f'<text x="{(L+W-R)/2}" y="{H-16}" text-anchor="middle">dead rows in deliveries before the round</text>')
out.append(f'<text transform="translate(20,{(T+H-B)/2}) rotate(-90)" text-anchor="middle">deliveries/s (claim + completion, batches of 100)</text>')
colors = {"now": "#1f77b4", "before": "#d62728"}
for k, (arm, color) in enumerate(colors.items()):
    pts = [(x(d), y(v)) for a, d, v, _ in rows if a == arm]
    if not pts:
        continue
    out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (color, " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)))
    for px, py in pts:
        out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color}"/>')
    ly = T + 20 + 22 * k
    out.append(f'<rect x="{W-R+10}" y="{ly-9}" width="12" height="12" fill="{color}"/>')
    out.append(f'<text x="{W-R+28}" y="{ly+1}">{arm}</text>')
out.append(f'<line x1="{L}" x2="{L}" y1="{T}" y2="{H-B}" stroke="black"/><line x1="{L}" x2="{W-R}" y1="{H-B}" y2="{H-B}" stroke="black"/>')
out.append("</svg>")
sys.stdout.write("\n".join(out) + "\n")
