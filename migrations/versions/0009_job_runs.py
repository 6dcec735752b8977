"""runs of a job: one per Spark application (or reporter) reporting under the job's name

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 12:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'job_runs',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.String(length=256), nullable=False),
        sa.Column('app_id', sa.String(length=256), nullable=True),
        sa.Column('master', sa.String(length=256), nullable=True),
        sa.Column('first_ms', sa.BigInteger(), nullable=False),
        sa.Column('last_ms', sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_runs_job_id_jobs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_job_runs')),
        sa.UniqueConstraint('job_id', 'run_id', name='uq_job_runs_job_run'),
    )
    with op.batch_alter_table('batches') as batch:
        batch.add_column(sa.Column('job_run_id', sa.String(length=256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('batches') as batch:
        batch.drop_column('job_run_id')
    op.drop_table('job_runs')
