-- PostgreSQL's page fill factor has no SQLite equivalent; this keeps both trees alike.
SELECT 1;
