"""Read one MLTable with Azure's own `mltable` package and write its rows as Parquet.

    python mltable_worker.py <folder holding the MLTable file> <out.parquet>

Run by mlops/runtime/mltable.py in the MLTable reader's environment (mltable's
azureml-dataprep and .venv's azureml-mlflow pin different azure-identity releases, so they
cannot share one). Standard library and mltable only.
"""

import sys


def main(argv=None):
    folder, out = (argv or sys.argv[1:])[:2]
    import mltable

    frame = mltable.load(folder).to_pandas_dataframe()
    frame.to_parquet(out, index=False)
    print(f"{len(frame)} rows, columns {list(frame.columns)}", flush=True)


if __name__ == "__main__":
    main()
