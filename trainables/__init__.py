"""Everything that runs inside a trial. Imports nothing from tuner/ and needs no Ray."""
