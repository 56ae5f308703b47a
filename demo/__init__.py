"""The `make run` demo and the helpers it shares with the tests: generated card
transactions and a reader for what a file table committed. Not part of the runner's
package (nothing here ships in the wheel or the deploy Lambda)."""
