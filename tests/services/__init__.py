"""Throwaway instances of the real services (slurmdbd, slapd, RabbitMQ) for tests."""
