from gitops_sync.cli import main

main()
