"""The gpu_rand benchmark (cupric.gpu_rand.benchmark) under the run_all protocol."""

from cupric.gpu_rand.benchmark import main, run  # noqa: F401

if __name__ == "__main__":
    main()
