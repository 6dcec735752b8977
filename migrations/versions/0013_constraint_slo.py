"""Latency constraints become SLOs (issue #45): the objective (share of spans within the bound, default 0.99) and
the counters of judged spans, good and bad, with the end of the spans counted so far

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 23:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('latency_constraints', schema=None) as batch_op:
        batch_op.add_column(sa.Column('objective', sa.Float(), nullable=False, server_default='0.99'))
        batch_op.add_column(sa.Column('spans_good', sa.BigInteger(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('spans_bad', sa.BigInteger(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('judged_until_ms', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('latency_constraints', schema=None) as batch_op:
        batch_op.drop_column('judged_until_ms')
        batch_op.drop_column('spans_bad')
        batch_op.drop_column('spans_good')
        batch_op.drop_column('objective')
