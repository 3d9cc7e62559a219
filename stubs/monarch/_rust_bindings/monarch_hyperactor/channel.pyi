# monarch._rust_bindings.monarch_hyperactor.channel (torchmonarch 0.7), the part torch_monarch uses.
import enum

class ChannelTransport(enum.Enum):
    TcpWithLocalhost = ...
