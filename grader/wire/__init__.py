"""What both sides of the trust boundary share, and nothing else: frames and typed messages.

Imports nothing of the grader (checked by import-linter in `make test`): the runner (untrusted)
and the judge (trusted) each import this, and only this, of each other's world.
"""

from .frames import Bounds, ProtocolError, exchange, receive, send
from .messages import (DEVICE_STOPPED, CallReply, DeviceReport, ErrorInfo, Finding, LaunchSummary, RanksTimingReply,
                       Reply, StreamOp, TimingReply, Transfer)

__all__ = ["DEVICE_STOPPED",
           "Bounds", "ProtocolError", "exchange", "receive", "send", "CallReply", "DeviceReport", "ErrorInfo",
           "Finding", "LaunchSummary", "RanksTimingReply", "Reply", "StreamOp", "TimingReply", "Transfer"]
