"""job attachment: how the job's reporter is attached (attach() or the listener jar) and the knobs it can apply

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 08:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('attachment', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.drop_column('attachment')
