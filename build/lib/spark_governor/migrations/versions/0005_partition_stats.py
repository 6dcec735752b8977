"""partition statistics per micro-batch (Prompt: key counts, block/bucket loads, BSI/BCI/KSR/MPI)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 19:30:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'partition_stats',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('received_ms', sa.BigInteger(), nullable=False),
        sa.Column('batch_id', sa.BigInteger(), nullable=True),
        sa.Column('query_id', sa.String(length=256), nullable=True),
        sa.Column('algorithm', sa.String(length=64), nullable=False),
        sa.Column('source', sa.String(length=32), nullable=True),
        sa.Column('partitions', sa.Integer(), nullable=False),
        sa.Column('reduce', sa.Integer(), nullable=False),
        sa.Column('tuples', sa.BigInteger(), nullable=False),
        sa.Column('keys', sa.BigInteger(), nullable=False),
        sa.Column('exact', sa.Boolean(), nullable=False),
        sa.Column('key_counts', sa.JSON(), nullable=False),
        sa.Column('other_keys', sa.BigInteger(), nullable=False),
        sa.Column('other_tuples', sa.BigInteger(), nullable=False),
        sa.Column('block_loads', sa.JSON(), nullable=False),
        sa.Column('block_cardinalities', sa.JSON(), nullable=False),
        sa.Column('bucket_loads', sa.JSON(), nullable=False),
        sa.Column('bsi', sa.Float(), nullable=True),
        sa.Column('bci', sa.Float(), nullable=True),
        sa.Column('ksr', sa.Float(), nullable=True),
        sa.Column('mpi', sa.Float(), nullable=True),
        sa.Column('max_mean_load', sa.Float(), nullable=True),
        sa.Column('bsi_buckets', sa.Float(), nullable=True),
        sa.Column('split_keys', sa.Integer(), nullable=True),
        sa.Column('stats_ms', sa.Float(), nullable=True),
        sa.Column('planning_ms', sa.Float(), nullable=True),
        sa.Column('processing_ms', sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_partition_stats_job_id_jobs'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_partition_stats')),
    )
    op.create_index('ix_partition_stats_job_received', 'partition_stats', ['job_id', 'received_ms'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_partition_stats_job_received', table_name='partition_stats')
    op.drop_table('partition_stats')
