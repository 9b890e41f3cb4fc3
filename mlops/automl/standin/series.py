"""One forecasting series as Azure's featurization shapes it: a regular time grid, its frequency
in the spelling this pandas reads, and the forecast horizon Azure picks for `auto`.

Azure's rule for `forecast_horizon: auto` (azureml-training-tabular's forecasting heuristics):
the horizon is one season of the series' frequency (24 for hourly data, 7 for daily, 4 for
weekly, 12 for monthly, 4 for quarterly, 1 for yearly; a multiple of the unit divides the
season); a frequency with no such season takes the default horizon, 1.
"""

from __future__ import annotations

import pandas as pd
from pandas.tseries import offsets

DEFAULT_HORIZON = 1  # Azure's TimeSeriesInternal.MAX_HORIZON_DEFAULT

# the aliases pandas 3 renamed, which specs written for Azure's older pandas use
LEGACY_ALIASES = {"H": "h", "BH": "bh", "T": "min", "S": "s", "L": "ms", "U": "us", "N": "ns",
                  "M": "ME", "BM": "BME", "SM": "SME", "Q": "QE", "BQ": "BQE", "A": "YE",
                  "Y": "YE", "BA": "BYE", "BY": "BYE"}


def offset(alias: str):
    """forecasting.frequency as this pandas reads it ("H" is "h" since pandas 2.2)."""
    try:
        return pd.tseries.frequencies.to_offset(alias)
    except ValueError:
        number = alias.rstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ-")
        unit, _, anchor = alias[len(number):].partition("-")
        renamed = number + LEGACY_ALIASES.get(unit.upper(), unit) + (f"-{anchor}" if anchor
                                                                    else "")
        return pd.tseries.frequencies.to_offset(renamed)


def regular(frame: pd.DataFrame, config) -> tuple[pd.DataFrame, object]:
    """A series on a regular grid, as Azure's forecasting featurization makes it: the time
    column parsed, one row per time (the first), gaps filled at `frequency` (given, else
    inferred, else the most common step) and carried forward; and that frequency."""
    time = config.time_column_name
    if time not in frame.columns:
        raise SystemExit(f"error: no column {time!r} (forecasting.time_column_name); the "
                         f"columns: {', '.join(map(str, frame.columns))}")
    frame = frame.assign(**{time: pd.to_datetime(frame[time])})
    frame = frame.sort_values(time).drop_duplicates(time).set_index(time)
    frequency = offset(config.frequency) if config.frequency else \
        pd.infer_freq(frame.index) or pd.Series(frame.index).diff().mode().iloc[0]
    filled = frame.asfreq(frequency).ffill()
    if len(filled) != len(frame):
        print(f"note: {len(filled) - len(frame)} missing time(s) at frequency {frequency} "
              "filled with the last value", flush=True)
    return filled.reset_index(), frequency


def _divides(whole: float, part: float) -> int:
    """whole / part when part divides whole evenly, else 0."""
    multiple = whole / part if part else 0.0
    return round(multiple) if multiple and abs(multiple - round(multiple)) < 1e-6 else 0


def season(frequency) -> int:
    """The periods in one season of `frequency`, by Azure's rule; 0 when it has none."""
    step = pd.tseries.frequencies.to_offset(frequency)
    if isinstance(step, offsets.Minute):
        return _divides(3600, step.n * 60) or _divides(86400, step.n * 60)
    if isinstance(step, offsets.Hour):
        return _divides(24, step.n)
    if isinstance(step, offsets.Day):
        return {1: 7, 7: 4}.get(step.n, 0)
    if isinstance(step, offsets.Week):
        return 4
    if isinstance(step, (offsets.MonthBegin, offsets.MonthEnd)):
        return _divides(12, step.n)
    if isinstance(step, (offsets.QuarterBegin, offsets.QuarterEnd)):
        return _divides(4, step.n)
    if isinstance(step, (offsets.YearBegin, offsets.YearEnd)):
        return 1 if step.n == 1 else 0
    return 0


def horizon(given: str, frequency) -> int:
    """forecasting.forecast_horizon: a number of periods, or `auto` (Azure's rule above)."""
    if str(given).lower() != "auto":
        return int(given)
    chosen = season(frequency) or DEFAULT_HORIZON
    step = pd.tseries.frequencies.to_offset(frequency).freqstr  # D, h, W-SUN, MS
    print(f"note: forecast_horizon: auto is {chosen} period(s) of {step}, by Azure's rule (one "
          "season of the frequency)", flush=True)
    return chosen
