"""``python -m demo`` (``make run``): the local demo, end to end."""

from demo.walkthrough import main

main()
