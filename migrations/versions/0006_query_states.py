"""streaming query state between micro-batches: running batch, liveness, source backlog

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 07:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'query_states',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('query_id', sa.String(length=256), nullable=False),
        sa.Column('run_id', sa.String(length=256), nullable=True),
        sa.Column('name', sa.String(length=256), nullable=True),
        sa.Column('received_ms', sa.BigInteger(), nullable=False),
        sa.Column('observed_ms', sa.BigInteger(), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('running_batch_id', sa.BigInteger(), nullable=True),
        sa.Column('running_batch_start_ms', sa.BigInteger(), nullable=True),
        sa.Column('last_batch_id', sa.BigInteger(), nullable=True),
        sa.Column('last_batch_end_ms', sa.BigInteger(), nullable=True),
        sa.Column('trigger_interval_ms', sa.BigInteger(), nullable=True),
        sa.Column('last_idle_ms', sa.BigInteger(), nullable=True),
        sa.Column('backlog_rows', sa.BigInteger(), nullable=True),
        sa.Column('oldest_unprocessed_ms', sa.BigInteger(), nullable=True),
        sa.Column('arrival_rows_per_second', sa.Float(), nullable=True),
        sa.Column('sources', sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_query_states_job_id_jobs'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_query_states')),
    )
    op.create_index('ix_query_states_job_observed', 'query_states', ['job_id', 'observed_ms'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_query_states_job_observed', table_name='query_states')
    op.drop_table('query_states')
