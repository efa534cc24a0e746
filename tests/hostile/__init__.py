"""The hostile-server suite: fake API servers that lie, and checks that the library never does."""
