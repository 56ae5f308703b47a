"""What query authors write, read from files: the project folder, manifests, the template and DDL."""
