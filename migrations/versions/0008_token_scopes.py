"""token scopes and job patterns, token origin and revocation; reporters bound to their token

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 09:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('api_tokens') as batch:
        batch.add_column(sa.Column('scopes', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('jobs', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('source', sa.String(length=16), nullable=False, server_default='config'))
        batch.add_column(sa.Column('revoked_ms', sa.BigInteger(), nullable=True))
    with op.batch_alter_table('reporters') as batch:
        batch.add_column(sa.Column('token_name', sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('reporters') as batch:
        batch.drop_column('token_name')
    with op.batch_alter_table('api_tokens') as batch:
        batch.drop_column('revoked_ms')
        batch.drop_column('source')
        batch.drop_column('jobs')
        batch.drop_column('scopes')
