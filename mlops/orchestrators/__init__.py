"""Job kinds made of many runtime tasks: sweep (with sampling and policies), pipeline (with graph),
parallel nodes (with mltable). The entry is mlops.run."""
