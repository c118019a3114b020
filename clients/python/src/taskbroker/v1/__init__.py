"""Generated from proto/taskbroker/v1 by clients/python/generate.sh; do not edit."""
