"""reasonkit's answer checker against the verdicts of other projects' tests (checker_cases.jsonl)."""
