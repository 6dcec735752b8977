"""``python -m spark_governor`` runs the command line (as the ``spark-governor`` console script)."""
from spark_governor.api.cli import main

if __name__ == "__main__":
    main()
