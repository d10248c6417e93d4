"""What the notebooks show and check: tables, figures, a few completions, each stage's final check.

None of it trains or scores: the numbers come from the units before this one (hardware
budgets, data reports, training metrics, evaluation results). Its private modules:
:mod:`~reasonkit.notebook._plots` (every figure and Markdown table, one call each),
:mod:`~reasonkit.notebook._show` (a few completions, GRPO's groups, the changes from stage
to stage, an LLM judge) and :mod:`~reasonkit.notebook._checks` (did each stage do its job,
and not make held-out answers worse beyond noise).
:mod:`reasonkit.plots` and :mod:`reasonkit.checks` are older faces of the same names.
"""

from reasonkit.notebook._checks import (
    StageDidNotLearn,
    check_dpo,
    check_grpo,
    check_sft,
    check_stages,
    paired_fall,
)
from reasonkit.notebook._plots import (
    advantage_table,
    array_table,
    before_after,
    budget_table,
    bullets,
    changed_answers,
    config_table,
    count_table,
    data_table,
    domain_table,
    drop_table,
    eval_tables,
    failure_table,
    gsm8k_table,
    judge_table,
    lora_table,
    markdown_table,
    parts_table,
    plot_domains,
    plot_dpo,
    plot_grpo,
    plot_held_out,
    plot_lengths,
    plot_loss_mask,
    plot_memory,
    plot_mix,
    plot_pass_at_k,
    plot_sft,
    plot_stages,
    plot_token_lengths,
    qualified_name,
    reward_table,
    side_by_side,
    stage_table,
)
from reasonkit.notebook._show import (
    describe_changes,
    group_advantages,
    judge,
    noise_points,
    pick_examples,
    rollout_groups,
    show_completions,
)

__all__ = ["markdown_table", "array_table", "count_table", "bullets", "budget_table", "data_table",
           "drop_table", "before_after", "reward_table", "stage_table", "gsm8k_table", "eval_tables",
           "domain_table", "failure_table", "judge_table", "side_by_side", "advantage_table",
           "qualified_name", "parts_table", "config_table", "lora_table", "plot_memory",
           "plot_token_lengths", "plot_mix", "plot_loss_mask", "plot_sft", "plot_dpo", "plot_grpo",
           "plot_held_out", "plot_stages", "plot_pass_at_k", "plot_domains", "plot_lengths",
           "changed_answers", "pick_examples", "show_completions", "group_advantages", "rollout_groups",
           "noise_points", "describe_changes", "judge", "StageDidNotLearn", "check_sft", "check_dpo",
           "check_grpo", "check_stages", "paired_fall"]

# Named as this package's: what a traceback or a notebook shows.
StageDidNotLearn.__module__ = __name__
