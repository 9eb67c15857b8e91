"""Tests of the Kubernetes backend without a cluster: pure functions, and the controller on a fake API."""
