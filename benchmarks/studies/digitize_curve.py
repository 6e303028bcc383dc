"""Reads a published learning curve (a line and its shaded band) off a matplotlib PNG, column by
column, for papers and benchmarks that publish curves only as images. Used for CleanRL's Atari PPO
curves (issue 27), which live on wandb and, offline, only in openrlbenchmark's figures.

    python -m benchmarks.studies.digitize_curve FIGURE.png --box TOP BOTTOM LEFT RIGHT --find_grid
        prints the gridlines' pixel rows and columns inside the panel's frame (for the calibration below)
    python -m benchmarks.studies.digitize_curve FIGURE.png --box TOP BOTTOM LEFT RIGHT \\
        --x_px X0 X1 --x_val V0 V1 --y_px Y0 Y1 --y_val W0 W1 [--line_rgb 221 132 82] > curve.json
        one row per pixel column from X0 to X1: {"x", "mean", "low", "high"} in the axes' units

The line is the pixels within --line_tolerance of --line_rgb (their median row); the band is every
pixel the line's translucent fill tints (red minus blue of at least --tint, as an orange fill over
white or over a blue fill gives; set it for other colors), its lowest and highest rows. A column
where the line is hidden has mean None.
"""

import argparse
import json

import numpy as np


def gridlines(panel: np.ndarray) -> tuple[list[int], list[int]]:
    """Rows and columns of the panel where most pixels are a light, untinted gray: matplotlib's
    grid."""
    r = panel[..., 0]
    g = panel[..., 1]
    b = panel[..., 2]
    gray = (abs(r - g) < 3) & (abs(g - b) < 3) & (r > 200) & (r < 232)
    rows = np.flatnonzero(gray.sum(1) > 0.3 * panel.shape[1])
    cols = np.flatnonzero(gray.sum(0) > 0.3 * panel.shape[0])
    return rows.tolist(), cols.tolist()


def digitize(
    image: np.ndarray,
    box: tuple,
    x_px,
    x_val,
    y_px,
    y_val,
    line_rgb,
    line_tolerance: int,
    tint: int,
):
    top, bottom, left, right = box

    def to_x(px):
        return x_val[0] + (px - x_px[0]) * (x_val[1] - x_val[0]) / (x_px[1] - x_px[0])

    def to_y(px):
        return y_val[0] + (px - y_px[0]) * (y_val[1] - y_val[0]) / (y_px[1] - y_px[0])

    rows = []
    for x in range(x_px[0], x_px[1] + 1):
        # inside the frame's lines
        column = image[top + 2 : bottom - 1, x]
        line = np.flatnonzero(np.abs(column - np.array(line_rgb)).sum(1) < line_tolerance) + top + 2
        band = np.flatnonzero(column[:, 0] - column[:, 2] >= tint) + top + 2
        rows.append(
            {
                "x": round(to_x(x), 1),
                "mean": round(to_y(np.median(line)), 3) if len(line) else None,
                "low": round(to_y(band.max()), 3) if len(band) else None,
                "high": round(to_y(band.min()), 3) if len(band) else None,
            }
        )
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figure")
    parser.add_argument(
        "--box",
        nargs=4,
        type=int,
        required=True,
        help="the panel's frame: top bottom left right (px)",
    )
    parser.add_argument(
        "--find_grid", action="store_true", help="print the panel's gridlines (px) and stop"
    )
    parser.add_argument(
        "--x_px", nargs=2, type=int, help="two pixel columns of known x (gridlines)"
    )
    parser.add_argument("--x_val", nargs=2, type=float, help="their x values")
    parser.add_argument("--y_px", nargs=2, type=int, help="two pixel rows of known y (gridlines)")
    parser.add_argument("--y_val", nargs=2, type=float, help="their y values")
    parser.add_argument(
        "--line_rgb", nargs=3, type=int, default=[221, 132, 82], help="the line's color"
    )
    parser.add_argument(
        "--line_tolerance", type=int, default=40, help="summed |RGB difference| of a line pixel"
    )
    parser.add_argument(
        "--tint", type=int, default=4, help="red minus blue of a pixel inside the band"
    )
    args = parser.parse_args()
    from PIL import Image

    image = np.asarray(Image.open(args.figure).convert("RGB")).astype(int)
    top, bottom, left, right = args.box
    if args.find_grid:
        rows, cols = gridlines(image[top:bottom, left:right])
        print(json.dumps({"rows": [top + r for r in rows], "columns": [left + c for c in cols]}))
        return
    print(
        json.dumps(
            digitize(
                image,
                args.box,
                args.x_px,
                args.x_val,
                args.y_px,
                args.y_val,
                args.line_rgb,
                args.line_tolerance,
                args.tint,
            )
        )
    )


if __name__ == "__main__":
    main()
