"""Kingman's options that issue #44's ablation removed: dropped from the stored policy configs, so that a config
saved before reads as today's (each removed option behaves as it was turned off)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 17:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None

#: frozen here (a migration does not follow the code): policies.kingman_config.REMOVED_OPTIONS of this revision
REMOVED = ("e_clamp_low", "e_clamp_high", "min_relative_change", "latest_window_bottleneck", "settle_after_change",
           "rate_span_s", "arrival_utilization", "in_flight", "backlog_growth_ratio", "backlog_projected",
           "cluster_model", "provisioning_delay_s", "trend_span_s", "max_load_growth", "scale_down_delay_s",
           "after_scale_down_s", "spare_when", "spare_rise_margin", "batch_load", "warmup_sizing", "catch_up",
           "catch_up_s", "backlog_tolerance_intervals")

policy_configs = sa.table('policy_configs', sa.column('id', sa.Integer()), sa.column('policy', sa.String()),
                          sa.column('config', sa.JSON()))


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.select(policy_configs.c.id, policy_configs.c.config)
                        .where(policy_configs.c.policy == 'kingman')).all()
    for row_id, config in rows:
        if isinstance(config, dict) and any(k in config for k in REMOVED):
            kept = {k: v for k, v in config.items() if k not in REMOVED}
            conn.execute(policy_configs.update().where(policy_configs.c.id == row_id).values(config=kept))


def downgrade() -> None:
    pass  # the removed options' values are gone; the code of 0011 reads a config without them as its defaults
