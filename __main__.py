"""The Pulumi program: reads the stack's config and builds the platform."""
