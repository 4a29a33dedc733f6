from colocation.cli import main

main()
