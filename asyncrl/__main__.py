from asyncrl.cli import run

run()
