from esper_cli.main import main

main()
