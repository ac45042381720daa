"""What every face's web edge shares: the one table from domain outcome to HTTP status,
the path converters and the error pages. Not an app: no models, no views of its own
beyond the error handlers the project's URLs name."""
