from loopctl.entry import main

main()
