from benchmarks.asrbench.engine_bench.cli import main

raise SystemExit(main())
