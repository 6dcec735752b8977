"""cluster profile of a job: executor add/remove times and the measured provisioning delay, warm-up
and driver overhead (aggregators.cluster_profile)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 09:30:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'executor_events',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.String(length=256), nullable=False),
        sa.Column('executor_id', sa.String(length=256), nullable=False),
        sa.Column('added_ms', sa.BigInteger(), nullable=True),
        sa.Column('removed_ms', sa.BigInteger(), nullable=True),
        sa.Column('cores', sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_executor_events_job_id_jobs'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_executor_events')),
        sa.UniqueConstraint('job_id', 'run_id', 'executor_id', name='uq_executor_events_job_run_executor'),
    )
    op.create_table(
        'cluster_profiles',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.String(length=256), nullable=True),
        sa.Column('updated_ms', sa.BigInteger(), nullable=False),
        sa.Column('profile', sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_cluster_profiles_job_id_jobs'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_cluster_profiles')),
        sa.UniqueConstraint('job_id', name=op.f('uq_cluster_profiles_job_id')),
    )


def downgrade() -> None:
    op.drop_table('cluster_profiles')
    op.drop_table('executor_events')
