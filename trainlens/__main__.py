from trainlens.cli import entry

entry()
