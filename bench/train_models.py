"""The examples' CNN and transformer written again in PyTorch, with weights copied from the
jitgraph modules, so a benchmark compares the same model, shapes and initial values."""
from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def torch_cnn(torch, model):
    """cnn_digits.CNN in NCHW PyTorch; conv weights (kh, kw, in, out) -> (out, in, kh, kw)."""
    F = torch.nn.functional
    t = lambda a: torch.nn.Parameter(torch.tensor(a))  # noqa: E731

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.b1 = t(model.conv1.weight.transpose(3, 2, 0, 1).copy()), t(model.conv1.bias)
            self.w2, self.b2 = t(model.conv2.weight.transpose(3, 2, 0, 1).copy()), t(model.conv2.bias)
            self.wh, self.bh = t(model.head.weight.T.copy()), t(model.head.bias)

        def forward(self, x):                        # x: (batch, 1, 8, 8)
            h = F.max_pool2d(F.relu(F.conv2d(x, self.w1, self.b1, padding=1)), 2)
            h = F.max_pool2d(F.relu(F.conv2d(h, self.w2, self.b2, padding=1)), 2)
            h = h.permute(0, 2, 3, 1).reshape(x.shape[0], -1)   # NHWC flatten order
            return F.linear(h, self.wh, self.bh)
    return CNN()


def torch_transformer(torch, model):
    """char_transformer.CharTransformer: same layout of every weight, attention written out."""
    F = torch.nn.functional
    t = lambda a: torch.nn.Parameter(torch.tensor(a))  # noqa: E731

    def linear(lin):
        return t(lin.weight.T.copy()), t(lin.bias)

    class Block(torch.nn.Module):
        def __init__(self, b):
            super().__init__()
            self.g1, self.be1, self.g2, self.be2 = t(b.ln1.weight), t(b.ln1.bias), t(b.ln2.weight), t(b.ln2.bias)
            self.wqkv, self.bqkv = linear(b.attn.qkv)
            self.wo, self.bo = linear(b.attn.out)
            self.w1, self.b1 = linear(b.fc1)
            self.w2, self.b2 = linear(b.fc2)
            self.heads = b.attn.num_heads

        def forward(self, x):
            B, T, D = x.shape
            h = F.layer_norm(x, (D,), self.g1, self.be1, 1e-5)
            qkv = F.linear(h, self.wqkv, self.bqkv).reshape(B, T, 3, self.heads, D // self.heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D // self.heads))
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            s = s.masked_fill(~mask, torch.finfo(s.dtype).min / 2)
            y = (s.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(B, T, D)
            x = x + F.linear(y, self.wo, self.bo)
            h = F.layer_norm(x, (D,), self.g2, self.be2, 1e-5)
            return x + F.linear(F.gelu(F.linear(h, self.w1, self.b1), approximate="tanh"),
                                self.w2, self.b2)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = t(model.tok.weight), t(model.pos)
            self.blocks = torch.nn.ModuleList(Block(b) for b in model.blocks)
            self.g, self.be = t(model.ln.weight), t(model.ln.bias)
            self.wh, self.bh = linear(model.head)

        def forward(self, ids):
            h = self.tok[ids] + self.pos[: ids.shape[1]]
            for b in self.blocks:
                h = b(h)
            h = F.layer_norm(h, (h.shape[-1],), self.g, self.be, 1e-5)
            return F.linear(h, self.wh, self.bh)
    return Net()


def torch_steps(torch, module, loss_of, lr):
    """(eager step, compiled step): forward, backward, Adam update; each returns the loss."""
    opt = torch.optim.Adam(module.parameters(), lr=lr)

    def step(*batch):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(module, *batch)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, opt
