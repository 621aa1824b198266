"""Objects of an S3-compatible bucket (AWS, MinIO, Ceph, SeaweedFS) with boto3, synced by LastModified watermark."""
