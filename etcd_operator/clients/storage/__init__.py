"""S3-compatible object storage."""
