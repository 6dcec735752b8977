"""latency constraints

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 08:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('latency_constraints',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('vertices', sa.JSON(), nullable=True),
    sa.Column('bound_ms', sa.Float(), nullable=False),
    sa.Column('span_s', sa.Float(), nullable=False),
    sa.Column('event_time_metric', sa.Boolean(), nullable=False),
    sa.Column('updated_ms', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_latency_constraints_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_latency_constraints')),
    sa.UniqueConstraint('job_id', 'name', name='uq_latency_constraints_job_name')
    )


def downgrade() -> None:
    op.drop_table('latency_constraints')
