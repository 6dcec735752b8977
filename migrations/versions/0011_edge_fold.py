"""statistics folded at the edge (report schema v3, issue #42): min/max and bytes per runtime window, the tasks of
a template window merged over its partitions, why a task row travelled, the span of each micro-batch's tasks,
executors' first tasks, the job's task detail

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07 01:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None

_MOMENTS = ("latency", "service", "service_per_record", "interarrival")
_SUMS = ("run_time_ms", "cpu_time_ns", "gc_time_ms", "input_records", "records_in", "input_bytes", "output_records",
         "output_bytes", "shuffle_read_records", "shuffle_read_bytes", "shuffle_write_records", "shuffle_write_bytes",
         "shuffle_fetch_wait_ms")


def upgrade() -> None:
    with op.batch_alter_table('runtime_windows') as t:
        for name in _MOMENTS:
            t.add_column(sa.Column(f'{name}_min', sa.Float(), nullable=True))
            t.add_column(sa.Column(f'{name}_max', sa.Float(), nullable=True))
        for name in ('input_bytes', 'output_bytes'):
            t.add_column(sa.Column(name, sa.BigInteger(), nullable=False, server_default='0'))
    with op.batch_alter_table('template_windows') as t:
        for name in ('tasks', 'failed_tasks'):
            t.add_column(sa.Column(name, sa.BigInteger(), nullable=False, server_default='0'))
        for name in _MOMENTS:
            t.add_column(sa.Column(f'{name}_n', sa.BigInteger(), nullable=False, server_default='0'))
            t.add_column(sa.Column(f'{name}_mean', sa.Float(), nullable=False, server_default='0'))
            t.add_column(sa.Column(f'{name}_m2', sa.Float(), nullable=False, server_default='0'))
            t.add_column(sa.Column(f'{name}_min', sa.Float(), nullable=True))
            t.add_column(sa.Column(f'{name}_max', sa.Float(), nullable=True))
        for name in _SUMS:
            t.add_column(sa.Column(name, sa.BigInteger(), nullable=False, server_default='0'))
        t.add_column(sa.Column('partitions', sa.Integer(), nullable=False, server_default='0'))
        t.add_column(sa.Column('max_vertex_run_time_ms', sa.BigInteger(), nullable=False, server_default='0'))
    with op.batch_alter_table('tasks') as t:
        t.add_column(sa.Column('detail', sa.String(length=8), nullable=True))
        t.add_column(sa.Column('sampled', sa.Boolean(), nullable=True))
    with op.batch_alter_table('executor_events') as t:
        t.add_column(sa.Column('first_launch_ms', sa.BigInteger(), nullable=True))
        t.add_column(sa.Column('first_finish_ms', sa.BigInteger(), nullable=True))
    with op.batch_alter_table('jobs') as t:
        t.add_column(sa.Column('task_detail', sa.String(length=8), nullable=True))
    op.create_table(
        'task_spans',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('app_id', sa.String(length=256), nullable=False),
        sa.Column('query_id', sa.String(length=256), nullable=False),
        sa.Column('batch_id', sa.BigInteger(), nullable=False),
        sa.Column('first_launch_ms', sa.BigInteger(), nullable=False),
        sa.Column('last_finish_ms', sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_task_spans_job_id_jobs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_task_spans')),
        sa.UniqueConstraint('job_id', 'app_id', 'query_id', 'batch_id', name='uq_task_spans_job_app_query_batch'),
    )


def downgrade() -> None:
    op.drop_table('task_spans')
    with op.batch_alter_table('jobs') as t:
        t.drop_column('task_detail')
    with op.batch_alter_table('executor_events') as t:
        t.drop_column('first_finish_ms')
        t.drop_column('first_launch_ms')
    with op.batch_alter_table('tasks') as t:
        t.drop_column('sampled')
        t.drop_column('detail')
    with op.batch_alter_table('template_windows') as t:
        for name in ('max_vertex_run_time_ms', 'partitions', *reversed(_SUMS)):
            t.drop_column(name)
        for name in reversed(_MOMENTS):
            for part in ('max', 'min', 'm2', 'mean', 'n'):
                t.drop_column(f'{name}_{part}')
        for name in ('failed_tasks', 'tasks'):
            t.drop_column(name)
    with op.batch_alter_table('runtime_windows') as t:
        for name in ('output_bytes', 'input_bytes'):
            t.drop_column(name)
        for name in reversed(_MOMENTS):
            t.drop_column(f'{name}_max')
            t.drop_column(f'{name}_min')
